"""GPU bench (real weights): does PPO under the p40 profile improve GSM8K accuracy, across a kill and resume?

The lent GPU machine runs one command for at most 10 minutes and keeps /tmp only while it stays warm, so the
bench is cut into phases, state kept under --work (/tmp/real). After staging the GGUF (bench/results/README.md,
"Real weights") and `bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh`, either one device call per phase:

    python3 bench/experiments/real_weights.py prepare --gguf /tmp/model.gguf --out $OUT
    python3 bench/experiments/real_weights.py train --out $OUT --kill-after 7 --budget-s 400  # killed mid-run
    python3 bench/experiments/real_weights.py train --out $OUT --budget-s 540  # same trainer command: resumes
    python3 bench/experiments/real_weights.py final --out $OUT

or, since a process that starts its own session (setsid) outlives the call that started it, the training part
as one detached `session` (one trainer start fewer per 10 minutes) followed by `wait` in the later calls:

    python3 bench/experiments/real_weights.py prepare --out $OUT
    setsid python3 bench/experiments/real_weights.py session --out /tmp/real/out --kill-after 11 --budget-s 1250 \
        > /tmp/real/session.log 2>&1 < /dev/null &
    python3 bench/experiments/real_weights.py wait --out /tmp/real/out --timeout-s 580  # in each later call
    python3 bench/experiments/real_weights.py final --out $OUT  # after `wait` says it ended

All through the product's CLI:
- prepare: bench/device/gguf_to_hf.py (the GGUF as a Hugging Face folder of Qwen2.5-0.5B-Instruct's shape: tied, Qwen2.5
  tokenizer), `verl-p40 prep`, two fixed slices of GSM8K test: held-out = rows 0..255 (evaluated only, never seen
  while training), validation = rows 256..383 (the trainer's own validation curve); `verl-p40 eval` of the base
  model on the held-out slice.
- train: `verl-p40 train --profile p40 --gpu-memory-cap-gb 24 --reward-method flexible --format-bonus 0.1`
  (checkpoint every --save-freq steps; `trainer.critic_warmup` from --critic-warmup: the critic's value head
  starts random, and until it fits, the advantages are mostly its noise) beside `verl-p40 monitor`. With
  --kill-after K it is sent SIGTERM once step K is logged (the stop-and-resume test); otherwise, when --budget-s
  would run out before the next checkpoint, it is stopped right after one (nothing lost). The trainer command is
  the same every time, so a later `train` resumes from the last checkpoint (verl's resume_mode auto).
- session: `train --kill-after K`, then `train` again until --budget-s (from the session's start) runs out.
- final: `verl-p40 eval --model BASE --compare latest` on the held-out slice (answers side by side), then report,
  and real-weights-work.tgz (state, logs, evals: `report --work` rebuilds everything from it).
- report (no GPU needed; rebuilds the summary from returned files too): real-weights-<date>.json (commands,
  accuracies, difference, paired sign test, how far two evaluations of the base model differ, whether the training
  reward rose from the base policy's warm-up rollouts, resume evidence, step time, peak memory) and
  real-weights-<date>.png (training reward, validation reward, and the critic's explained variance beside the
  actor's entropy over steps).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import tarfile
import time
from pathlib import Path

from lib.real_runs import State, cli, monitor_peaks, ray_stop, real_model, run, wait
from verl_p40.evaluation import stats
from verl_p40.run.trainer_log import read_steps

HELDOUT_ROWS, VAL_ROWS = (0, 256), (256, 128)


# ------------------------------------------------------------------------------------------------- prepare


def slices(data: Path) -> tuple[Path, Path]:
    import pyarrow.parquet as pq

    table = pq.read_table(data / "test.parquet")
    heldout, val = data / "heldout-256.parquet", data / "val-128.parquet"
    pq.write_table(table.slice(*HELDOUT_ROWS), heldout)
    pq.write_table(table.slice(*VAL_ROWS), val)
    return heldout, val


def eval_args(args: argparse.Namespace, work: Path) -> list[str]:
    return [
        "--data",
        str(work / "gsm8k" / "heldout-256.parquet"),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--batch-size",
        "128",
    ]


def prepare(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    model, data = work / "qwen-real", work / "gsm8k"
    real_model(args.gguf, args.tokenizer, model)
    run(
        cli(
            "prep",
            "--source",
            args.gsm8k,
            "--out",
            str(data),
            "--tokenizer",
            args.tokenizer,
            "--val-size",
            "0",
            "--skip-existing",
        )
    )
    slices(data)
    command = cli(
        "eval",
        "--model",
        str(model),
        "--out",
        str(work / "eval-base"),
        "--logs",
        str(work / "none"),
        *eval_args(args, work),
    )
    run(command)
    base = json.loads((work / "eval-base" / "report.json").read_text())
    state.data["base_eval"] = {"command": "verl-p40 " + shlex.join(command[3:]), "models": base["models"]}
    copy_out(work / "eval-base", out, "real-weights-base-eval-")


# --------------------------------------------------------------------------------------------------- train


def train_command(args: argparse.Namespace, work: Path) -> list[str]:
    """The trainer command: identical in every `train` phase, which is what makes the second one resume."""
    return cli(
        "train",
        "--profile",
        "p40",
        "--model",
        str(work / "qwen-real"),
        "--data",
        str(work / "gsm8k"),
        "--checkpoints",
        str(work / "ckpt"),
        "--logs",
        str(work / "logs"),
        "--gpu-memory-cap-gb",
        "24",
        "--reward-method",
        "flexible",
        "--format-bonus",
        "0.1",
        f"data.val_files={work / 'gsm8k' / 'val-128.parquet'}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={args.test_freq}",
        f"trainer.save_freq={args.save_freq}",
        f"trainer.total_training_steps={args.steps}",
        f"data.max_response_length={args.max_new_tokens}",
        f"actor_rollout_ref.actor.optim.lr={args.actor_lr}",
        f"trainer.critic_warmup={args.critic_warmup}",
        *args.override,
    )


def should_stop(
    step: int, previous: int, step_times: list[float], elapsed: float, args: argparse.Namespace
) -> str | None:
    """Why to stop the trainer now that `step` is the last step logged (`previous` before it), or None.

    step_times: seconds between consecutive step lines of this run (validation and saving included)."""
    if args.kill_after is not None and step >= args.kill_after:
        return f"killed after step {step} (--kill-after {args.kill_after})"
    checkpointed = step // args.save_freq > previous // args.save_freq  # a checkpoint step was reached or passed
    if args.budget_s is None or not checkpointed or not step_times:
        return None
    per_step = statistics.median(step_times[-args.save_freq :])
    # the next checkpoint needs save_freq more steps, one of them carrying validation and the save
    if elapsed + per_step * (args.save_freq + 2) + args.teardown_s > args.budget_s:
        return f"stopped after the checkpoint of step {step - step % args.save_freq}: the next one would not fit"
    return None


def resume_lines(text: str) -> list[str]:
    """verl's own lines about the checkpoint it resumed from (printed by a Ray actor: prefixed, coloured)."""
    plain = (re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines())
    return [
        line.split(")", 1)[-1].strip() if line.startswith("(") else line.strip()
        for line in plain
        if any(key in line for key in ("Load from checkpoint folder", "Setting global step", "Resuming from"))
    ]


def train(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    from lib.ppo_runner import environment

    state.data.setdefault("environment", environment())
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ray_stop()
    before = set(logs.glob("train-*.log"))
    monitor = subprocess.Popen(cli("monitor", "--interval", "1", "--out", str(logs / "gpu")))
    command = train_command(args, work)
    print("$ " + shlex.join(command), flush=True)
    started = time.time()
    proc = subprocess.Popen(command)
    seen, stamps, reason = 0, [], None
    while proc.poll() is None:
        time.sleep(2)
        elapsed = time.time() - started
        new = sorted(set(logs.glob("train-*.log")) - before)
        steps = read_steps(new[-1]) if new else []
        if steps and int(steps[-1]["step"]) > seen:
            previous, seen = seen, int(steps[-1]["step"])
            stamps.append(elapsed)
            reason = should_stop(seen, previous, [b - a for a, b in zip(stamps, stamps[1:])], elapsed, args)
        if reason is None and args.budget_s is not None and elapsed > args.budget_s - args.teardown_s:
            reason = "hard stop: --budget-s reached"
        if reason:
            print(f"[real_weights] {reason}: SIGTERM", flush=True)
            proc.send_signal(signal.SIGTERM)
            break
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    ray_stop()
    monitor.send_signal(signal.SIGTERM)
    monitor.wait(timeout=30)
    log = sorted(set(logs.glob("train-*.log")) - before)[-1]
    text = log.read_text(errors="replace")
    steps = read_steps(log)
    state.data["train_command"] = "verl-p40 " + shlex.join(command[3:])
    state.data["train_runs"].append(
        {
            "log": log.name,
            "returncode": proc.returncode,
            "stop_reason": reason or "finished",
            "wall_s": round(time.time() - started, 1),
            "first_step": int(steps[0]["step"]) if steps else None,
            "last_step": int(steps[-1]["step"]) if steps else None,
            "resume_lines": resume_lines(text),
            "checkpoints_after": sorted(p.name for p in (work / "ckpt").rglob("global_step_*")),
        }
    )
    shutil.copy(log, out / f"real-weights-{log.name}")
    if (logs / "gpu").is_dir():  # the monitor writes nothing without a GPU
        shutil.copytree(logs / "gpu", out / "real-weights-gpu", dirs_exist_ok=True)


def session(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    """The whole training part in one process, meant to outlive the device call that starts it (setsid):
    `train --kill-after K`, then the same trainer command again (it resumes) until --budget-s, counted from the
    start of the session, runs out. `wait` follows it from later calls."""
    pid_file = work / "session.pid"
    pid_file.write_text(str(os.getpid()))
    started = time.time()
    try:
        if args.kill_after is not None:
            train(argparse.Namespace(**{**vars(args), "budget_s": None}), work, out, state)
            state.save(out)
        budget = None if args.budget_s is None else args.budget_s - (time.time() - started)
        train(argparse.Namespace(**{**vars(args), "kill_after": None, "budget_s": budget}), work, out, state)
    finally:
        pid_file.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------------- final


def sign_test(records: list[dict]) -> dict:
    """Paired comparison on the same questions: questions only the trained model gets right vs only the base."""
    out = {}
    for kind in ("strict", "flexible"):
        test = stats.paired(((r["models"]["base"], r["models"]["trained"]) for r in records), kind)
        out[kind] = {
            "trained_only_right": test["second_higher"],
            "base_only_right": test["first_higher"],
            "p_value_two_sided": test["p_value"],
        }
    return out


def reward_rise(steps: list[dict], warmup: int, draws: int = 200_000) -> dict | None:
    """Did the training reward rise? The rollouts of steps 1..W (W = trainer.critic_warmup) all come from the base
    policy: verl updates the actor for the first time in step W, after that step's rollout. So those steps' rewards
    are the base policy's, and every later step's come from a trained actor. One-sided permutation test of the
    step means (is the later mean higher than chance splits of the same steps give?): exact when the splits are
    few enough, else `draws` random splits with a fixed seed. None without at least two steps on each side."""
    import itertools
    import random

    scores = {int(s["step"]): float(s["critic/score/mean"]) for s in steps if "critic/score/mean" in s}
    base = [score for step, score in scores.items() if 1 <= step <= warmup]
    trained = [score for step, score in scores.items() if step > warmup]
    if len(base) < 2 or len(trained) < 2:
        return None
    values, observed = base + trained, sum(base)
    splits = math.comb(len(values), len(base))
    if splits <= 2 * draws:
        hits = sum(sum(group) <= observed + 1e-12 for group in itertools.combinations(values, len(base)))
        method, p = "exact", hits / splits
    else:
        rng = random.Random(0)
        hits = sum(sum(rng.sample(values, len(base))) <= observed + 1e-12 for _ in range(draws))
        method, p = f"{draws} random splits", (hits + 1) / (draws + 1)
    return {
        "base_policy_steps": [1, warmup],
        "base_policy_mean": round(statistics.mean(base), 4),
        "trained_steps": [warmup + 1, max(scores)],
        "trained_mean": round(statistics.mean(trained), 4),
        "rise": round(statistics.mean(trained) - statistics.mean(base), 4),
        "p_value_one_sided": p,
        "test": f"permutation of step means ({method})",
    }


def repeat_eval(first: list[dict], second: list[dict], model: str = "base") -> dict:
    """The same model evaluated twice on the same questions (alone in `prepare`, beside the trained one in
    `final`): how far greedy evaluation itself moves (bf16 kernels on Ampere and newer need not repeat exactly)."""
    pairs = [(a["models"][model], b["models"][model]) for a, b in zip(first, second, strict=True)]
    out: dict = {"questions": len(pairs), "answers_differing": sum(a["answer"] != b["answer"] for a, b in pairs)}
    for kind in ("strict", "flexible"):
        out[kind] = {
            "first": round(statistics.mean(a[kind] for a, _ in pairs), 4),
            "second": round(statistics.mean(b[kind] for _, b in pairs), 4),
            "scores_differing": sum(stats.paired(pairs, kind)[k] for k in ("second_higher", "first_higher")),
        }
    return out


def copy_out(folder: Path, out: Path, prefix: str) -> None:
    for name in ("report.md", "report.json", "answers.jsonl", "curves.png"):
        if (folder / name).exists():
            shutil.copy(folder / name, out / f"{prefix}{name}")


def final(args: argparse.Namespace, work: Path, out: Path, state: State) -> dict:
    command = cli(
        "eval",
        "--model",
        str(work / "qwen-real"),
        "--compare",
        "latest",
        "--checkpoints",
        str(work / "ckpt"),
        "--out",
        str(work / "eval-final"),
        "--logs",
        str(work / "logs"),
        *eval_args(args, work),
    )
    run(command)
    state.data["final_eval_command"] = "verl-p40 " + shlex.join(command[3:])
    state.save(out)
    result = report(args, work, out, state)
    bundle(work, out / "real-weights-work.tgz")
    return result


def bundle(work: Path, path: Path) -> None:
    """Everything `report` needs, in one file (the device returns few files per call): rebuild the summary
    anywhere with `report --work <unpacked>`."""
    with tarfile.open(path, "w:gz") as tar:
        for name in ("state.json", "logs", "eval-base", "eval-final"):
            if (work / name).exists():
                tar.add(work / name, arcname=name)


def effective_steps(runs: list[dict], logs: Path) -> list[dict]:
    """Each step's metrics from the run that last logged it (a resumed run redoes the steps a kill lost)."""
    by_step: dict[int, dict] = {}
    for index, run_ in enumerate(runs):
        for step in read_steps(logs / run_["log"]):
            by_step[int(step["step"])] = {**by_step.get(int(step["step"]), {}), **step, "run": index + 1}
    return [by_step[k] for k in sorted(by_step)]


def redone_steps(logs: Path, killed: dict, resumed: dict) -> dict:
    """The steps both the killed run and the resumed one trained: same checkpoint and data order, so the same
    metrics up to float noise when the resume is faithful."""
    first = {int(s["step"]): s for s in read_steps(logs / killed["log"])}
    again = {int(s["step"]): s for s in read_steps(logs / resumed["log"])}
    both = sorted(k for k in first.keys() & again.keys() if k > resumed["first_step"])
    keys = ("critic/score/mean", "actor/entropy", "actor/pg_loss", "critic/vf_loss", "response_length/mean")
    return {
        "steps": both,
        **{
            key: {"killed_run": [first[k].get(key) for k in both], "resumed_run": [again[k].get(key) for k in both]}
            for key in keys
        },
    }


def report(args: argparse.Namespace, work: Path, out: Path, state: State) -> dict:
    """real-weights-<date>.json and .png from the work folder (needs no GPU: rerun it on returned files)."""
    evaluation = json.loads((work / "eval-final" / "report.json").read_text())
    records = [json.loads(line) for line in (work / "eval-final" / "answers.jsonl").read_text().splitlines()]
    base_file = work / "eval-base" / "answers.jsonl"
    base_records = [json.loads(line) for line in base_file.read_text().splitlines()] if base_file.is_file() else []
    runs, command = state.data["train_runs"], state.data.get("train_command")
    warmup = command_setting(command, "trainer.critic_warmup")
    steps = effective_steps(runs, work / "logs")
    timed = [s["timing_s/step"] for s in steps if "timing_s/step" in s][1:]
    killed = next((i for i, r in enumerate(runs) if r["stop_reason"].startswith("killed")), None)
    resumed = runs[killed + 1] if killed is not None and killed + 1 < len(runs) else None
    gpu = monitor_peaks(work / "logs" / "gpu")
    models = evaluation["models"]
    result = {
        "environment": state.data.get("environment"),
        "commands": {
            "base_eval": state.data.get("base_eval", {}).get("command"),
            "train (every run, unchanged)": state.data.get("train_command"),
            "final_eval": state.data.get("final_eval_command"),
        },
        "heldout": f"GSM8K test rows {HELDOUT_ROWS[0]}..{sum(HELDOUT_ROWS) - 1} ({HELDOUT_ROWS[1]} questions, greedy)",
        "validation": f"GSM8K test rows {VAL_ROWS[0]}..{sum(VAL_ROWS) - 1} ({VAL_ROWS[1]} questions), trainer's val",
        "base_eval_alone": state.data.get("base_eval", {}).get("models"),
        "eval": models,
        "difference": {
            k: round(models["trained"][f"accuracy_{k}"] - models["base"][f"accuracy_{k}"], 4)
            for k in ("strict", "flexible")
        },
        "paired_sign_test": sign_test(records),
        "base_evaluated_twice": repeat_eval(base_records, records) if base_records else None,
        "training_reward_rise": reward_rise(steps, warmup),
        "train_runs": runs,
        "resume": {
            "save_freq": command_setting(command, "trainer.save_freq", args.save_freq),
            "killed_run": killed + 1 if killed is not None else None,
            "killed_after_step": runs[killed]["last_step"] if killed is not None else None,
            "resumed_from_checkpoint_step": resumed["first_step"] if resumed else None,
            "first_step_trained_again": resumed["first_step"] + 1 if resumed else None,
            "steps_lost": runs[killed]["last_step"] - resumed["first_step"] if resumed else None,
            "evidence": resume_lines((work / "logs" / resumed["log"]).read_text(errors="replace")) if resumed else [],
            "redone_steps": redone_steps(work / "logs", runs[killed], resumed) if resumed else None,
        },
        "steps_trained": max((int(s["step"]) for s in steps), default=0),
        "step_time_s_median": round(statistics.median(timed), 2) if timed else None,
        "peak_torch_max_allocated_gb": max((s.get("perf/max_memory_allocated_gb", 0) for s in steps), default=None),
        "peak_torch_max_reserved_gb": max((s.get("perf/max_memory_reserved_gb", 0) for s in steps), default=None),
        "gpu_monitor_peaks": gpu,
        "steps": steps,
    }
    stem = out / f"real-weights-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    copy_out(work / "eval-final", out, "real-weights-eval-")
    plot(steps, stem.with_suffix(".png"), result["resume"], warmup, result["training_reward_rise"])
    return result


def command_setting(command: str | None, key: str, default: int = 0) -> int:
    """An integer verl setting (`key=N`) as the recorded trainer command gave it: the report describes that run,
    whatever the options of the `report` call."""
    found = re.findall(rf"(?:^|\s){re.escape(key)}=(\d+)(?=\s|$)", command or "")
    return int(found[-1]) if found else default


def plot(steps: list[dict], path: Path, resume: dict, warmup: int = 0, rise: dict | None = None) -> None:
    """Training reward (with the base policy's and the trained actor's means), validation reward (with its standard
    error), and the critic's fit beside the actor's entropy (what explains them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(key: str) -> tuple[list[float], list[float]]:
        pairs = [(s["step"], s[key]) for s in steps if key in s]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.2))
    x, y = series("critic/score/mean")
    ax1.plot(x, y, marker=".", label="per step")
    if len(y) >= 5:
        ax1.plot(x, [statistics.mean(y[max(0, i - 4) : i + 1]) for i in range(len(y))], label="mean of last 5")
    if rise:
        for (first, last), mean, label in (
            (rise["base_policy_steps"], rise["base_policy_mean"], "base policy"),
            (rise["trained_steps"], rise["trained_mean"], "trained actor"),
        ):
            ax1.hlines(mean, first, last, colors="black", linestyles="--", linewidth=1)
            ax1.annotate(f"{label}: {mean:.3f}", (first, mean), textcoords="offset points", xytext=(0, 4), fontsize=8)
        ax1.text(
            0.99,
            0.02,
            f"rise {rise['rise']:+.3f}, one-sided p = {rise['p_value_one_sided']:.2g}",
            transform=ax1.transAxes,
            ha="right",
            fontsize=8,
        )
    ax1.set_title("training reward (flexible + 0.1 format bonus), batch 64")
    val = sorted({(s["step"], v) for s in steps for k, v in s.items() if k.startswith("val-core/")})
    if val:
        # binomial standard error of an accuracy on VAL_ROWS[1] questions (the format bonus adds a little)
        error = [math.sqrt(max(v[1], 0.0) * max(1 - v[1], 0.0) / VAL_ROWS[1]) for v in val]
        ax2.errorbar(
            [v[0] for v in val],
            [v[1] for v in val],
            yerr=error,
            marker="o",
            capsize=3,
            label=f"\u00b11 standard error ({VAL_ROWS[1]} questions)",
        )
    ax2.set_title("validation reward, greedy (test rows 256..383)")
    x, y = series("critic/vf_explained_var")
    ax3.plot(x, [max(v, -5.0) for v in y], marker=".", color="tab:purple", label="critic explained variance (floor -5)")
    ax3.axhline(0, color="grey", linewidth=0.6)
    ax3.set_ylabel("explained variance")
    entropy = ax3.twinx()
    x, y = series("actor/entropy")
    entropy.plot(x, y, marker=".", color="tab:green", label="actor entropy")
    entropy.set_ylabel("entropy")
    ax3.set_title("critic fit and actor entropy")
    handles = ax3.get_legend_handles_labels()[0] + entropy.get_legend_handles_labels()[0]
    ax3.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="lower right")
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("PPO step")
        if warmup > 1:  # verl first updates the actor in step `warmup`, after that step's rollout
            ax.axvspan(
                0.5,
                warmup + 0.5,
                color="grey",
                alpha=0.15,
                label=f"critic warm-up: steps 1..{warmup} roll out the base policy",
            )
        if resume.get("killed_after_step") is not None:
            ax.axvline(
                resume["killed_after_step"],
                color="red",
                linestyle=":",
                label=f"killed after step {resume['killed_after_step']}, "
                f"resumed from the step-{resume['resumed_from_checkpoint_step']} checkpoint",
            )
    ax1.legend(fontsize=7, loc="upper left")
    ax2.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=("prepare", "train", "session", "wait", "final", "report"))
    parser.add_argument("--gguf", default="/tmp/model.gguf")
    parser.add_argument("--tokenizer", default=".gpu-shared/qwen2.5-0.5b-instruct")
    parser.add_argument("--gsm8k", default=".gpu-shared/gsm8k")
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default="/tmp/real")
    parser.add_argument("--steps", type=int, default=40, help="trainer.total_training_steps")
    parser.add_argument("--save-freq", type=int, default=5)
    parser.add_argument("--test-freq", type=int, default=5)
    parser.add_argument("--actor-lr", type=float, default=2e-6)
    parser.add_argument("--max-new-tokens", type=int, default=320)
    parser.add_argument(
        "--critic-warmup",
        type=int,
        default=8,
        help="trainer.critic_warmup: steps 1..N-1 train only the critic (its value head starts random)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more verl override for the trainer command (repeatable; later ones win)",
    )
    parser.add_argument("--kill-after", type=int, help="train: SIGTERM once this step is logged")
    parser.add_argument("--budget-s", type=float, help="train: stop at the last checkpoint that fits this time")
    parser.add_argument("--teardown-s", type=float, default=45)
    parser.add_argument("--copy-to", help="wait: copy the logs so far here before returning (e.g. $OUT/partial)")
    parser.add_argument("--timeout-s", type=float, default=580, help="wait: return after this long at most")
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    if args.phase == "wait":  # reads only: the session process owns state.json
        wait(args, work)
        return
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    state = State(work)
    try:
        if args.phase == "prepare":
            prepare(args, work, out, state)
        elif args.phase == "train":
            train(args, work, out, state)
        elif args.phase == "session":
            session(args, work, out, state)
        else:
            result = (final if args.phase == "final" else report)(args, work, out, state)
            print(json.dumps({k: result[k] for k in ("eval", "difference", "paired_sign_test", "resume")}, indent=1))
    finally:
        state.save(out)


if __name__ == "__main__":
    main()
