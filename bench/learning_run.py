"""GPU bench (real weights): does the GSM8K recipe (`--algorithm grpo-gsm8k`) make the model solve more problems?

The learning issue's run, on one GPU or several, with the real-weights proxy (Qwen2.5-Coder-0.5B-Instruct of
Qwen2.5-0.5B-Instruct's exact shape, staged as in bench/results/README.md, "Real weights"), in one of two modes:
- `--mode p40`: every process sees a Tesla P40 (the Pascal mask), `--profile p40 --gpu-memory-cap-gb 24`: the path
  a P40 owner runs, at the masked H200's speed;
- `--mode fast`: the same recipe unmasked, with nothing but what a user passes (`--profile auto`: the ampere profile
  on an H200, TF32 by `--tf32 auto`, and the memory plan's sizes for the card: states kept on the GPU, generation in
  one chunk), so that a learning check of tens of steps fits one GPU session. Its curve stands for the P40 path
  when a p40-mode run tracks it.
After `bash /tmp/bundle/install.sh && VERL_P40_NO_RANDOM=1 source bench/device/gpu_setup.sh`, in device calls kept
back to back (/tmp lives only while the machine stays warm):

    python3 bench/learning_run.py prepare --out $OUT
    setsid python3 bench/learning_run.py session --mode fast --budget-s 1000 > /tmp/learn/session.log 2>&1 < /dev/null &
    python3 bench/learning_run.py wait --timeout-s 580    # in each later call, until it says the session ended;
    cp -r /tmp/learn/out/. $OUT                           # then the results, made by the session itself

The session trains, stops the trainer gracefully when --budget-s would run out, and goes on to `final` by itself,
so no device call has to be timed to stop it; `stop` asks it to stop training early (a file the session watches;
never `pkill -f` a pattern on that machine: it also matches the device call's own command line, and took the
machine down once, 2026-11-30).

All through the product's CLI:
- prepare: bench/device/gguf_to_hf.py, then `verl-p40 prep --val-size 256`: 256 train rows held out as val.parquet,
  which the trainer validates on. The held-out set is the whole test split (1,319 questions): nothing in the recipe's
  selection or the run reads it until `final`.
- session: `verl-p40 monitor` beside `verl-p40 train --algorithm grpo-gsm8k` (the mode's profile and settings) on
  every GPU; when --budget-s would run out it sends the trainer one SIGTERM, which finishes the step, saves it and
  exits (the product's graceful stop).
- final: the last checkpoint merged once (verl_p40.models.checkpoints), then `verl-p40 eval --model BASE --compare
  MERGED --dtype fp32` on the test split, split over --eval-gpus GPUs (one part each, then the whole split read back
  from the parts' answers: the report and its paired sign tests cover all 1,319), then `report`.
- horizon (--score-steps 10,20,...): the steps named before the run scored on the whole test split with no pick,
  the base model once and each step's merged checkpoint alone (`verl-p40 eval`), each step's answers paired with the
  base's (sign test): horizon-<date>.json and a plot against prompts seen and projected P40 hours; horizon-report
  redraws them from a returned work bundle.
- session --no-eval: the training and its validation curve only (a p40-mode run whose session holds no held-out
  evaluation); its record says it was not evaluated.
- audit: one step of the recipe on the P40 path (half its prompts, not validated or saved) with the Pascal mask's op
  audit on: learning-audit-<date>.json counts half-precision ops and SDPA kernels in every process.
- compare (no GPU): several runs' validation curves against prompts seen (`--axis prompts`), the GPU-minutes of
  their training steps (`gpu-minutes`: recipes at equal GPU time) or their projected P40 hours (`p40-hours`), one
  plot and a markdown table.
- `--algorithm ppo-gsm8k` (session, audit): another recipe through the same modes, to set beside grpo-gsm8k.
- report (no GPU): learning-<date>.json (commands, accuracies, paired sign tests, rollouts, GPU-minutes, rollouts per
  GPU-minute, peaks, P40 projection) and learning-<date>.png (training reward and its parts, validation accuracy,
  entropy, response length), from the returned work bundle (`report --work DIR`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import tarfile
import time
from pathlib import Path

from lib.device_runs import mask_env, torch_of
from lib.real_runs import State, cli, monitor_peaks, ray_stop, real_model, run, wait
from verl_p40.run.trainer_log import read_steps

HERE = Path(__file__).resolve().parent
RECIPE = "grpo-gsm8k"
VAL_SIZE = 256
MAX_NEW_TOKENS = 512  # verl-p40 eval's default, and the recipe's data.max_response_length
MODES = {
    "p40": {
        "profile": "p40",
        "mask": "6.1",
        "cli": ["--gpu-memory-cap-gb", "24"],
        "sets": [],
        "setup": "Pascal mask PASCAL_MASK_CC=6.1 (Tesla P40), 24 GB cap per process, audit off",
    },
    # the product's own plan on the unmasked GPU, as a user runs it: the auto profile (ampere on an H200, TF32 by
    # --tf32 auto) and the memory plan's sizes for the card's memory (on an H200: nothing offloaded, generation in
    # one chunk, large micro-batches). The hand-set sizes this mode had before the memory plan ran 41.5 s a step
    # against the plan's 39.9 (bench/results/speed-2026-12-02: h200-hand, h200-plain); they are gone.
    "fast": {
        "profile": "auto",
        "mask": None,
        "cli": [],
        "sets": [],
        "setup": "unmasked, the product's plan as a user runs it (--profile auto, the memory plan; no hand-set sizes)",
    },
}


def prepare(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    model, data = work / "qwen-real", work / "gsm8k"
    real_model(args.gguf, args.tokenizer, model)
    command = cli(
        "prep", "--source", args.gsm8k, "--out", str(data), "--tokenizer", args.tokenizer, "--val-size", str(VAL_SIZE)
    )
    run(command)
    state.data["prep_command"] = "verl-p40 " + shlex.join(command[3:])


def train_command(args: argparse.Namespace, work: Path, *, audit: bool = False) -> list[str]:
    """The mode's `verl-p40 train` of the recipe. `audit`: one step at half the prompts (AUDIT_SETS), not validated
    or saved, into folders of its own."""
    mode = MODES[args.mode]
    run_sets = (
        AUDIT_SETS
        if audit
        else [
            "trainer.val_before_train=true",
            f"trainer.test_freq={args.test_freq}",
            f"trainer.save_freq={args.save_freq}",
            f"trainer.total_training_steps={args.steps}",
        ]
    )
    suffix = "-audit" if audit else ""
    return cli(
        "train",
        "--profile",
        mode["profile"],
        "--algorithm",
        args.algorithm,
        *mode["cli"],
        "--model",
        str(work / "qwen-real"),
        "--data",
        str(work / "gsm8k"),
        "--checkpoints",
        str(work / f"ckpt{suffix}"),
        "--logs",
        str(work / f"logs{suffix}"),
        *run_sets,
        *mode["sets"],
        *args.override,
    )


AUDIT_SETS = [
    # the recipe at half its prompts a step (one update of 16): the same ops, kernels and micro-batches in half the
    # time; the audit makes a step ~2.7x slower
    "data.train_batch_size=16",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.total_training_steps=1",
]


def session(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    """The trainer under a time budget, meant to outlive the device call that starts it (setsid)."""
    pid_file = work / "session.pid"
    pid_file.write_text(str(os.getpid()))
    (work / "stop").unlink(missing_ok=True)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = mask_env(MODES[args.mode]["mask"])
    state.data["mode"] = args.mode
    state.data["algorithm"] = args.algorithm
    try:
        ray_stop()
        monitor = subprocess.Popen(cli("monitor", "--interval", "1", "--out", str(logs / "gpu")), env=env)
        state.data["gpu_name"] = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"], capture_output=True, text=True
            ).stdout.strip()
            or "unknown GPU"
        )
        state.data["torch"] = torch_of(env)  # here, on the GPU machine: report and horizon may run elsewhere
        command = train_command(args, work)
        print("$ " + shlex.join(command), flush=True)
        started, stop_sent = time.time(), None
        proc = subprocess.Popen(command, env=env)
        while proc.poll() is None:
            time.sleep(2)
            why = (
                "budget"
                if time.time() - started > args.budget_s - args.stop_s
                else "asked to stop"
                if (work / "stop").exists()
                else None
            )
            if stop_sent is None and why:
                print(f"[learning_run] {why}: SIGTERM (the trainer saves this step and exits)", flush=True)
                proc.send_signal(signal.SIGTERM)
                stop_sent = time.time() - started
        code = proc.wait()
        ray_stop()
        monitor.send_signal(signal.SIGTERM)
        monitor.wait(timeout=30)
        log = sorted(logs.glob("train-*.log"))[-1]
        steps = read_steps(log)
        state.data.update(
            {
                "train_command": "verl-p40 " + shlex.join(command[3:]),
                "train_log": log.name,
                "returncode": code,
                "stop_sent_at_s": stop_sent,
                "wall_s": round(time.time() - started, 1),
                "last_step": int(steps[-1]["step"]) if steps else None,
                "checkpoints": sorted(p.name for p in (work / "ckpt").rglob("global_step_*")),
            }
        )
        state.save(out)
        if args.no_eval:  # the validation curve only: the held-out evaluation is left to a run that has the time
            report(work, out, state)
            bundle(work, out)
        else:
            final(args, work, out, state)
    finally:
        pid_file.unlink(missing_ok=True)


def audit(args: argparse.Namespace, work: Path, out: Path) -> dict:
    """One step of the recipe on the P40 path with the Pascal mask's op audit on: every aten op on a bf16/fp16 CUDA
    tensor and every SDPA kernel, in the driver and every worker. A P40 plan must show no half-precision op."""
    from lib.device_runs import audit_summary

    if args.mode != "p40":
        raise SystemExit("audit: the op audit is of the P40 path (--mode p40)")
    audit_file, logs = work / "audit.jsonl", work / "logs-audit"
    audit_file.unlink(missing_ok=True)
    shutil.rmtree(logs, ignore_errors=True)  # an earlier audit's log would be read as this one's
    command = train_command(args, work, audit=True)
    print("$ " + shlex.join(command), flush=True)
    ray_stop()
    started = time.time()
    code = subprocess.run(command, env=mask_env(MODES["p40"]["mask"], audit_file)).returncode
    ray_stop()
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch_of(mask_env(MODES["p40"]["mask"])),
        "recipe": args.algorithm,
        "setup": MODES["p40"]["setup"].replace("audit off", "op audit on (PASCAL_MASK_AUDIT): not a timing"),
        "command": "PASCAL_MASK=1 PASCAL_MASK_CC=6.1 PASCAL_MASK_AUDIT=audit.jsonl verl-p40 " + shlex.join(command[3:]),
        "model": str((work / "qwen-real").resolve()),
        "returncode": code,
        "wall_s": round(time.time() - started, 1),
        "audit": audit_summary(audit_file),
        "steps": [s for log in sorted(logs.glob("train-*.log")) for s in read_steps(log)],
    }
    (out / f"learning-audit-{result['date']}.json").write_text(json.dumps(result, indent=2) + "\n")
    if audit_file.exists():
        shutil.copy(audit_file, out / "learning-audit.jsonl")
    for log in logs.glob("train-*.log"):
        shutil.copy(log, out / f"learning-audit-{log.name}")
    return result


def bundle(work: Path, out: Path) -> None:
    """learning-work.tgz: what `report --work` redraws everything from (state, logs, the held-out answers)."""
    with tarfile.open(out / "learning-work.tgz", "w:gz") as tar:
        for name in (
            "state.json",
            "logs",
            "eval-final",
            *sorted(p.name for p in work.glob("eval-base*")),
            *sorted(p.name for p in work.glob("eval-step-*")),
        ):
            if (work / name).exists():
                tar.add(work / name, arcname=name, filter=lambda t: None if "/ckpt" in t.name else t)


def parts(data: Path, count: int, limit: int | None) -> list[Path]:
    """The held-out split in `count` parts, one per GPU (the first `limit` rows only, for a smoke check)."""
    import pyarrow.parquet as pq

    table = pq.read_table(data / "test.parquet")
    if limit:
        table = table.slice(0, limit)
        pq.write_table(table, data / "heldout.parquet")
    size = -(-table.num_rows // count)
    paths = [data / f"heldout-{i}.parquet" for i in range(count)]
    for i, path in enumerate(paths):
        pq.write_table(table.slice(i * size, size), path)
    return paths


def validation_accuracy(log: Path) -> dict[int, float]:
    """Step -> the greedy validation accuracy (val-core/...) the trainer logged at that step."""
    return {int(s["step"]): float(v) for s in read_steps(log) for k, v in s.items() if k.startswith("val-core/")}


def pick_checkpoint(rule: str, log: Path, ckpt: Path) -> dict:
    """The checkpoint the held-out evaluation scores. `latest`: the last one saved. `best-validation`: among the
    saved steps that were validated, the one of highest validation accuracy (the later on a tie); validation is
    train rows (val.parquet), so the test split still decides nothing before it is scored once."""
    saved = {int(p.name.removeprefix("global_step_")): p / "actor" for p in ckpt.rglob("global_step_*") if p.is_dir()}
    if not saved:
        raise SystemExit(f"{ckpt}: no checkpoint was saved")
    accuracy = validation_accuracy(log)
    candidates = {step: accuracy[step] for step in saved if step in accuracy and step > 0}
    if rule == "latest" or not candidates:
        step = max(saved)
        why = "the last checkpoint" + ("" if rule == "latest" else " (no saved step was validated)")
    else:
        # the highest validation alone: the challenger of the product's `best` (patches/p40_best.py), unpaired here
        from verl_p40.patches.p40_best import challenger_step

        step = challenger_step(accuracy, saved)
        why = f"the highest validation accuracy of the saved steps {sorted(candidates)}"
    return {
        "rule": rule,
        "step": step,
        "path": str(saved[step]),
        "validation_accuracy": accuracy.get(step),
        "why": why,
        "candidates": {str(s): candidates[s] for s in sorted(candidates)},
    }


def final(args: argparse.Namespace, work: Path, out: Path, state: State) -> dict:
    from verl_p40.models.checkpoints import resolve_model

    os.environ.update(mask_env(MODES[state.data.get("mode", args.mode)]["mask"]))
    started = time.time()
    picked = pick_checkpoint(args.pick, work / "logs" / state.data["train_log"], work / "ckpt")
    state.data["evaluated_checkpoint"] = picked
    state.save(out)
    print(f"[learning_run] evaluating step {picked['step']}: {picked['why']}", flush=True)
    trained = resolve_model(picked["path"], work / "ckpt")  # merged once, before several processes would all try
    base, data = work / "qwen-real", work / "gsm8k"
    common = [
        "--model",
        str(base),
        "--compare",
        str(trained),
        "--dtype",
        "fp32",
        "--max-new-tokens",
        str(MAX_NEW_TOKENS),
        "--batch-size",
        str(args.eval_batch),
        "--logs",
        str(work / "logs"),
    ]
    procs, commands = [], []
    pieces = parts(data, args.eval_gpus, args.heldout_limit)
    for gpu, part in enumerate(pieces):
        command = cli("eval", *common, "--data", str(part), "--out", str(work / f"eval-{part.stem}"))
        commands.append(f"CUDA_VISIBLE_DEVICES={gpu} verl-p40 " + shlex.join(command[3:]))
        print("$ " + commands[-1], flush=True)
        procs.append(subprocess.Popen(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}))
    if any(p.wait() for p in procs):
        raise SystemExit("an evaluation failed (output above)")
    whole = work / "eval-final"
    whole.mkdir(exist_ok=True)
    with open(whole / "answers.jsonl", "w", encoding="utf-8") as handle:
        for part in pieces:
            handle.write((work / f"eval-{part.stem}" / "answers.jsonl").read_text(encoding="utf-8"))
    heldout = data / ("heldout.parquet" if args.heldout_limit else "test.parquet")
    command = cli("eval", *common, "--data", str(heldout), "--out", str(whole))
    run(command)  # every answer is there already: it only scores and reports
    commands.append("verl-p40 " + shlex.join(command[3:]))
    state.data["final_eval"] = {"commands": commands, "wall_s": round(time.time() - started, 1), "gpus": args.eval_gpus}
    state.save(out)
    result = report(work, out, state)
    bundle(work, out)
    return result


def horizon(args: argparse.Namespace, work: Path, out: Path, state: State) -> dict:
    """The run scored on the whole test split at the steps named before it (--score-steps: no pick among them), each
    against the base model's answers (evaluated once) with the paired sign test, against prompts seen and the P40
    hours the run's own steps project to: horizon-<date>.json and .png. Each checkpoint is merged by the product and
    scored by `verl-p40 eval` alone; the pairs are read back from the answers files (no model, no GPU)."""
    from verl_p40.models.checkpoints import resolve_model

    os.environ.update(mask_env(MODES[state.data.get("mode", args.mode)]["mask"]))
    steps = [int(s) for s in args.score_steps.split(",")]
    saved = {int(p.name.removeprefix("global_step_")): p / "actor" for p in (work / "ckpt").rglob("global_step_*")}
    missing = [s for s in steps if s not in saved]
    if missing:
        raise SystemExit(f"steps {missing} were named but not saved (saved: {sorted(saved)})")
    common = ["--data", str(work / "gsm8k" / "test.parquet"), "--dtype", "fp32"]
    common += ["--max-new-tokens", str(MAX_NEW_TOKENS), "--batch-size", str(args.eval_batch)]
    commands, started = [], time.time()
    for name, model in [("base", work / "qwen-real"), *((f"step-{s}", saved[s]) for s in steps)]:
        if (work / f"eval-{name}" / "report.json").is_file():
            continue  # scored by an earlier call of this session
        model = resolve_model(str(model), work / "ckpt") if name != "base" else model
        command = cli("eval", "--model", str(model), *common, "--out", str(work / f"eval-{name}"))
        commands.append("verl-p40 " + shlex.join(command[3:]))
        print("$ " + commands[-1], flush=True)
        run(command)
    state.data.setdefault("horizon_commands", []).extend(commands)
    state.data["horizon_wall_s"] = state.data.get("horizon_wall_s", 0) + round(time.time() - started, 1)
    state.save(out)
    result = horizon_report(work, out, state, steps)
    bundle(work, out)
    return result


def scored(folder: Path) -> dict[int, dict]:
    """Question index -> the one model's scores in an eval folder's answers.jsonl."""
    from verl_p40.evaluation import answers

    return {i: record["models"]["base"] for i, (_, record) in answers.read(folder / answers.ANSWERS).items()}


def horizon_report(work: Path, out: Path, state: State, steps: list[int]) -> dict:
    from verl_p40.evaluation import evaluate

    base = scored(work / "eval-base")
    log = work / "logs" / state.data["train_log"]
    setting = trainer_settings(log)
    prompts = int(setting["data.train_batch_size"])
    projection = p40_projection(
        state.data.get("mode", "p40"),
        [s for s in read_steps(log) if "timing_s/step" in s],
        work,
        state.data.get("algorithm", RECIPE),
        setting,
    )
    p40_step = projection.get("p40_s_per_step")
    rows = []
    for step in steps:
        trained = scored(work / f"eval-step-{step}")
        if set(trained) != set(base):
            raise SystemExit(f"step {step} and the base answered different questions")
        records = [{"models": {"base": base[i], "trained": trained[i]}} for i in sorted(base)]
        summary = evaluate.summarise(records, ["base", "trained"])
        rows.append(
            {
                "step": step,
                "prompts_seen": step * prompts,
                "p40_hours": round(step * p40_step / 3600, 2) if p40_step else None,
                "accuracy": summary["trained"],
                "against_base": evaluate.paired_differences(records, "base", "trained"),
            }
        )
    result = {
        "what": "the run scored on the whole test split at the steps named before it (no pick), fp32, greedy, "
        f"{MAX_NEW_TOKENS} new tokens, each step's answers paired with the base model's (sign test)",
        "mode": state.data.get("mode"),
        "torch": state.data.get("torch"),
        "train_command": state.data.get("train_command"),
        "eval_commands": state.data.get("horizon_commands"),
        "base": evaluate.summarise([{"models": {"base": base[i]}} for i in sorted(base)], ["base"])["base"],
        "steps": rows,
        "prompts_per_step": prompts,
        "p40_step_s": p40_step,
        "gpu_minutes_scoring": round(state.data.get("horizon_wall_s", 0) / 60, 2),
    }
    stamp = time.strftime("%Y-%m-%d")
    (out / f"horizon-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot_horizon(result, out / f"horizon-{stamp}.png")
    return result


def plot_horizon(result: dict, path: Path) -> None:
    """Flexible accuracy on the test split at each scored step against prompts seen (and P40 hours above)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["steps"]
    x = [0] + [r["prompts_seen"] for r in rows]
    y = [100 * result["base"]["accuracy_flexible"]] + [100 * r["accuracy"]["accuracy_flexible"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, y, marker="o")
    for r, yy in zip(rows, y[1:]):
        ax.annotate(f"p={r['against_base']['flexible']['p_value']:.2g}", (r["prompts_seen"], yy), fontsize=8)
    ax.set_xlabel("prompts seen")
    ax.set_ylabel("test split, flexible accuracy (%)")
    ax.set_title("the run scored at steps named before it (no pick)", pad=30)
    if result.get("p40_step_s"):
        hours_a_prompt = result["p40_step_s"] / result["prompts_per_step"] / 3600
        top = ax.secondary_xaxis("top", functions=(lambda v: v * hours_a_prompt, lambda h: h / hours_a_prompt))
        top.set_xlabel("P40 hours (projected)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rescore(work: Path) -> None:
    """eval-final's report.json and report.md scored again from its answers.jsonl with this checkout's scoring and
    statistics (no model, no GPU): for a result returned by a device call before a fix to either."""
    from verl_p40.evaluation import answers, evaluate

    final_dir = work / "eval-final"
    old = json.loads((final_dir / "report.json").read_text())
    labels = list(old["models"])
    records = [record for _, (_, record) in sorted(answers.read(final_dir / answers.ANSWERS).items())]
    summary = evaluate.summarise(records, labels)
    comparison = evaluate.paired_differences(records, *labels) if len(labels) == 2 else None
    paths = {label: old["models"][label]["path"] for label in labels}
    new = {**old, "models": {label: {"path": paths[label], **summary[label]} for label in labels}}
    new["comparison"] = comparison
    (final_dir / "report.json").write_text(json.dumps(new, indent=2) + "\n")
    markdown = evaluate.markdown(summary, records, labels, 10, paths, bool(old.get("curves")), old["dtype"], comparison)
    (final_dir / "report.md").write_text(markdown)


def report(work: Path, out: Path, state: State) -> dict:
    data = state.data
    evaluated = (work / "eval-final" / "report.json").is_file()
    evaluation = json.loads((work / "eval-final" / "report.json").read_text()) if evaluated else None
    log = work / "logs" / data["train_log"]
    steps = [s for s in read_steps(log) if "timing_s/step" in s]  # step 0 is validation only
    validated = [s for s in read_steps(log) if any(k.startswith("val-core/") for k in s)]
    setting = trainer_settings(log)
    gpus = int(setting["trainer.n_gpus_per_node"]) * int(setting.get("trainer.nnodes", 1))
    per_step = int(setting["data.train_batch_size"]) * int(setting["actor_rollout_ref.rollout.n"])
    sequences = len(steps) * per_step
    train_minutes = data["wall_s"] / 60
    eval_minutes = data.get("final_eval", {}).get("wall_s", 0) / 60
    step_s = [s["timing_s/step"] for s in steps]
    mode = data.get("mode", "p40")
    gpu_name = data.get("gpu_name", "NVIDIA H200")
    eval_gpus = data.get("final_eval", {}).get("gpus", 1)
    algorithm = data.get("algorithm", RECIPE)
    projected = p40_projection(mode, steps, work, algorithm, setting)
    trained_s = dict(zip((int(s["step"]) for s in steps), itertools.accumulate(step_s)))
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "mode": mode,
        "torch": data.get("torch"),
        "recipe": algorithm,
        "setup": f"{gpus} x {gpu_name}, {MODES[mode]['setup']}; real-weights proxy Qwen2.5-Coder-0.5B-Instruct "
        "(Qwen2.5-0.5B-Instruct's shape, Qwen2.5 tokenizer)",
        "commands": {
            "prep": data.get("prep_command"),
            "train": data.get("train_command"),
            "eval": data.get("final_eval", {}).get("commands"),
        },
        "held_out": {
            "questions": evaluation["questions"],
            "split": f"GSM8K test, the first {evaluation['questions']} of 1,319 (validation: val.parquet, "
            f"{VAL_SIZE} train rows)",
            "dtype": evaluation["dtype"],
            "greedy": True,
            "max_new_tokens": evaluation["max_new_tokens"],
        }
        if evaluation
        else "not evaluated: this run gives its validation curve only (session --no-eval)",
        "eval": evaluation["models"] if evaluation else None,
        "comparison": evaluation["comparison"] if evaluation else None,
        "training": {
            "steps": len(steps),
            "stop": {"returncode": data.get("returncode"), "sigterm_at_s": data.get("stop_sent_at_s")},
            "prompts_per_step": int(setting["data.train_batch_size"]),
            "sequences_per_step": per_step,
            "prompts_seen": len(steps) * int(setting["data.train_batch_size"]),
            "rollouts": sequences,
            "gpus": gpus,
            "median_step_s": round(statistics.median(step_s), 2) if step_s else None,
            "wall_s": data["wall_s"],
            "checkpoints": data.get("checkpoints"),
            "evaluated_checkpoint": data.get("evaluated_checkpoint"),
            "prompts_seen_by_evaluated": (data.get("evaluated_checkpoint") or {}).get("step", len(steps))
            * int(setting["data.train_batch_size"]),
        },
        "gpu_minutes": {
            "train": round(gpus * train_minutes, 2),
            "final_eval": round(eval_gpus * eval_minutes, 2),
            "note": "wall minutes x GPUs; the trainer's start-up and validation included",
        },
        "rollouts_per_gpu_minute": round(sequences / (gpus * train_minutes), 1) if train_minutes else None,
        "p40_projection": projected,
        "validation": [
            {
                "step": int(s["step"]),
                "prompts_seen": int(s["step"]) * int(setting["data.train_batch_size"]),
                # GPU-minutes of the training steps before it (start-up and validation left out: the same for any
                # recipe), and the P40 hours the same steps project to
                "train_gpu_minutes": round(gpus * trained_s.get(int(s["step"]), 0.0) / 60, 2),
                "p40_hours": round(int(s["step"]) * projected["p40_s_per_step"] / 3600, 3)
                if projected.get("p40_s_per_step")
                else None,
                **{k: v for k, v in s.items() if k.startswith("val-core/")},
            }
            for s in validated
        ],
        "memory": monitor_peaks(work / "logs" / "gpu", 24.0 if mode == "p40" else None),
    }
    stamp = result["date"]
    (out / f"learning-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ("report.md", "report.json") if evaluated else ():
        shutil.copy(work / "eval-final" / name, out / f"learning-eval-{name}")
    plot(read_steps(log), out / f"learning-{stamp}.png", int(setting["data.train_batch_size"]))
    return result


def p40_projection(
    mode: str, steps: list[dict], work: Path, algorithm: str = RECIPE, setting: dict[str, str] | None = None
) -> dict:
    """What the run's steps would take on one Tesla P40: bench/project.py's projection of the recipe as the p40
    profile runs it, at this run's logged answer lengths and phase times. `setting`: the run's trainer overrides
    (trainer_settings), whose schedule (steps, validation, saves) the projected config repeats."""
    setting = setting or {}
    if not steps:
        return {"note": "no training step was logged: nothing to project"}
    from lib import run_projection as project
    from verl_p40.perf import projection

    config = work / "qwen-real" / "config.json"
    config = config if config.is_file() else project.SHARED / "config.json"
    shape = projection.Shape.from_config(json.loads(config.read_text()))
    command = "verl-p40 " + shlex.join(
        train_command(
            argparse.Namespace(
                mode="p40",
                test_freq=setting.get("trainer.test_freq", -1),
                save_freq=setting.get("trainer.save_freq", -1),
                steps=setting.get("trainer.total_training_steps", len(steps)),
                override=[],
                algorithm=algorithm,
            ),
            work,
        )[3:]
    )
    row = project.project_run(f"{mode} run as the p40 profile", command, steps, shape, recent=True)
    step_s = row["p40_projection"]["step"]
    source = "bench/project.py: the p40 profile's config of the recipe at this run's logged answer lengths; " + (
        "its generation time is the masked run's own (the p40 plan's chunks)"
        if mode == "p40"
        else "its generation time from this run's (unmasked, one 256-answer batch) is a lower bound"
    )
    return {
        "p40_s_per_step": step_s,
        "p40_hours_per_gsm8k_epoch": row["p40_hours_per_gsm8k_epoch"],
        "p40_hours_for_this_run": round(step_s * len(steps) / 3600, 2),
        "projected_config": command,
        "source": source,
    }


def trainer_settings(log: Path) -> dict[str, str]:
    """The verl overrides the run was started with: the first line of verl-p40's train log is the trainer command."""
    first = log.read_text(errors="replace").splitlines()[0]
    return dict(word.lstrip("+").split("=", 1) for word in shlex.split(first.removeprefix("$ ")) if "=" in word)


def standard_error(accuracy: float, questions: int = VAL_SIZE) -> float:
    share = max(min(accuracy, 1.0), 0.0)
    return math.sqrt(share * (1 - share) / questions)


def plot(steps: list[dict], path: Path, prompts_per_step: int | None = None) -> None:
    """Training reward, validation reward (with its standard error), actor entropy, response length; against prompts
    seen when the run's prompts a step are known (runs of other batches compare on that axis), else against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = prompts_per_step or 1

    def series(key: str) -> tuple[list[float], list[float]]:
        pairs = [(s["step"] * scale, s[key]) for s in steps if key in s]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    x, y = series("critic/score/mean")
    axes[0].plot(x, y, marker=".", alpha=0.5, label="reward (the recipe's)")
    for key, label in (
        ("reward/flexible/mean", "correct, last number"),
        ("reward/strict/mean", "correct, '#### N'"),
        ("reward/format/mean", "'#### N' used"),
    ):
        x, y = series(key)
        if len(y) >= 5:
            y = [statistics.mean(y[max(0, i - 4) : i + 1]) for i in range(len(y))]
        if y:
            axes[0].plot(x, y, label=label + (" (mean of last 5)" if len(y) >= 5 else ""))
    axes[0].set_title("training answers (sampled)")
    val = sorted({(s["step"] * scale, v) for s in steps for k, v in s.items() if k.startswith("val-core/")})
    if val:
        error = [standard_error(v) for _, v in val]
        axes[1].errorbar(
            [v[0] for v in val],
            [v[1] for v in val],
            yerr=error,
            marker="o",
            capsize=3,
            label=f"\u00b11 standard error ({VAL_SIZE} questions)",
        )
    axes[1].set_title("validation accuracy, greedy (val.parquet: train rows)")
    x, y = series("actor/entropy")
    axes[2].plot(x, y, marker=".", color="tab:green")
    axes[2].set_title("actor entropy")
    x, y = series("response_length/mean")
    axes[3].plot(x, y, marker=".", label="mean")
    x, y = series("response_length/clip_ratio")
    if y:
        clip = axes[3].twinx()
        clip.plot(x, y, marker=".", color="tab:red", label="share cut at the limit")
        clip.set_ylim(0, 1)
    axes[3].set_title("response length (tokens) and share cut at the limit")
    for ax in axes:
        ax.set_xlabel(f"prompts seen ({prompts_per_step} a step)" if prompts_per_step else "step")
        if not any(len(line.get_xdata()) for line in ax.lines) and not ax.containers:
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", color="grey")
    for ax in axes[:2]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


AXES = {
    "prompts": ("prompts_seen", "prompts seen"),
    "gpu-minutes": ("train_gpu_minutes", "GPU-minutes of training steps"),
    "p40-hours": ("p40_hours", "P40 hours (projected)"),
}


def compare(records: list[Path], path: Path, axis: str = "prompts") -> str:
    """The validation curves of several runs (learning-<date>.json) on one plot against prompts seen, the GPU-minutes
    of their training steps or their projected P40 hours (`axis`), each point with its standard error, and the same
    as a markdown table (one row per value on the axis, one column per run)."""
    key, title = AXES[axis]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {}
    for record in records:
        result = json.loads(record.read_text())
        per_step = result["training"]["prompts_per_step"]
        label = f"{record.parent.name} ({result.get('recipe', RECIPE)}, {result['mode']}, {per_step} prompts a step)"
        points = {}
        for v in result["validation"]:
            x = v.get(key, v["step"] * per_step if key == "prompts_seen" else None)
            if x is None:
                raise SystemExit(f"{record}: its validation has no {key} (a record from before it: report it again)")
            points[x] = next(a for k, a in v.items() if k.startswith("val-core/"))
        curves[label] = points
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, curve in curves.items():
        x = sorted(curve)
        ax.errorbar(
            x, [curve[p] for p in x], yerr=[standard_error(curve[p]) for p in x], marker="o", capsize=3, label=label
        )
    ax.set_xlabel(title)
    ax.set_ylabel("validation accuracy, greedy")
    ax.set_title(f"validation accuracy ({VAL_SIZE} train rows held out; bars: \u00b11 standard error)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    seen = sorted({p for curve in curves.values() for p in curve})
    lines = [f"| {title} | " + " | ".join(curves) + " |", "| --- |" + " --- |" * len(curves)]
    for p in seen:
        cells = [f"{curves[label][p] * 100:.1f} %" if p in curves[label] else "" for label in curves]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "phase",
        choices=(
            "prepare",
            "session",
            "wait",
            "stop",
            "audit",
            "final",
            "horizon",
            "horizon-report",
            "rescore",
            "report",
            "plot-record",
            "compare",
        ),
    )
    parser.add_argument("--runs", type=Path, nargs="+", help="compare: the runs' learning-<date>.json")
    parser.add_argument("--axis", choices=sorted(AXES), default="prompts", help="compare: what the curves are against")
    parser.add_argument(
        "--algorithm", default=RECIPE, help="session, audit: the recipe trained (grpo-gsm8k; ppo-gsm8k to compare)"
    )
    parser.add_argument("--no-eval", action="store_true", help="session: the validation curve only, no held-out eval")
    parser.add_argument("--record", type=Path, help="plot-record: a JSON of the per-step rewards a device call printed")
    parser.add_argument("--gguf", default="/tmp/model.gguf")
    parser.add_argument("--tokenizer", default=".gpu-shared/qwen2.5-0.5b-instruct")
    parser.add_argument("--gsm8k", default=".gpu-shared/gsm8k")
    parser.add_argument("--out", default="/tmp/learn/out")
    parser.add_argument("--work", default="/tmp/learn")
    parser.add_argument("--steps", type=int, default=500, help="trainer.total_training_steps (the budget ends it)")
    parser.add_argument("--save-freq", type=int, default=20)
    parser.add_argument("--test-freq", type=int, default=10)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--budget-s", type=float, default=780, help="session: from its start to the trainer's exit")
    parser.add_argument("--stop-s", type=float, default=100, help="session: time the graceful stop is given")
    parser.add_argument("--timeout-s", type=float, default=580, help="wait: return after this long at most")
    parser.add_argument("--copy-to", help="wait: copy the logs so far here before returning (e.g. $OUT/partial)")
    parser.add_argument("--mode", choices=sorted(MODES), default="p40", help="session: the P40 path or the fast path")
    parser.add_argument("--eval-batch", type=int, default=256)
    parser.add_argument("--eval-gpus", type=int, default=1, help="final: GPUs the held-out evaluation is split over")
    parser.add_argument(
        "--pick",
        choices=("best-validation", "latest"),
        default="best-validation",
        help="final: which saved checkpoint the test split scores (validation is train rows, never the test split)",
    )
    parser.add_argument(
        "--score-steps", default="", help="horizon: the saved steps scored on the test split, named before the run"
    )
    parser.add_argument("--heldout-limit", type=int, help="final: only the first N test questions (a smoke check)")
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    if args.phase == "wait":  # reads only: the session process owns state.json
        wait(args, work)
        return
    if args.phase == "plot-record":  # a run whose logs were lost: the curve from what its calls printed
        record = json.loads(args.record.read_text())
        steps = [{"step": int(k), "critic/score/mean": v} for k, v in record["training_reward_per_step"].items()]
        plot(steps, args.record.with_suffix(".png"))
        return
    if args.phase == "compare":  # no GPU: the runs' validation curves against prompts seen, --out a .png
        table = compare(args.runs, Path(args.out), args.axis)
        Path(args.out).with_suffix(".md").write_text(table)
        print(table, end="")
        return
    if args.phase == "rescore":  # then `report` to redraw the run record from it
        rescore(work)
        return
    if args.phase == "stop":  # the session sees the file and stops its trainer (nothing else is signalled)
        (work / "stop").touch()
        return
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    state = State(work, "learning-state.json")
    if args.phase in ("report", "final", "horizon", "horizon-report") and not state.path.exists():
        raise SystemExit(f"{state.path}: no state; unpack learning-work.tgz into --work first")
    try:
        if args.phase == "prepare":
            prepare(args, work, out, state)
        elif args.phase == "session":
            session(args, work, out, state)
        elif args.phase == "audit":
            print(json.dumps(audit(args, work, out)["audit"], indent=1))
        elif args.phase in ("horizon", "horizon-report"):  # the report alone: from a returned work bundle, no GPU
            steps = [int(s) for s in args.score_steps.split(",")]
            result = (
                horizon(args, work, out, state) if args.phase == "horizon" else horizon_report(work, out, state, steps)
            )
            print(
                json.dumps([{k: r[k] for k in ("step", "accuracy", "against_base")} for r in result["steps"]], indent=1)
            )
        else:
            result = final(args, work, out, state) if args.phase == "final" else report(work, out, state)
            print(json.dumps({k: result[k] for k in ("eval", "comparison", "rollouts_per_gpu_minute")}, indent=1))
    finally:
        state.save(out)


if __name__ == "__main__":
    main()
