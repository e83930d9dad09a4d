"""Every card at its own speed (issue 41): the memory-aware plan against the plans it replaces, on the lent GPU.

Each run is `verl-p40 train` of the GSM8K recipe for a few steps on random weights of Qwen2.5-0.5B's shape (their
answers always run to the 512-token limit, as the longest answer of a real step does, so a step's generation and its
passes' widths are those of a real step), one trainer at a time, one after another:

- p40-after / p40-before: the p40 profile under the Pascal mask with the 24 GB cap, the memory plan's sizes against
  the sizes the profile had before it (P40_BEFORE); ppo-p40: the seed's PPO on the same path;
- h200-plain: what a user runs on the unmasked H200 (`--algorithm grpo-gsm8k`, nothing else) against h200-hand, the
  hand-set fast mode of bench/learning_run.py before this issue (HAND_SET);
- cap16 / cap24 / cap40: the plain command under each cap, validation included (before the first step and at the
  last, on 256 held-out train rows).

For each: seconds a step (median without the first), phases, torch's measured peak (verl's max_memory_allocated)
beside the plan's predicted peak (the run record's `memory`), and the P40 projection of the run's own config.

    python3 bench/speed_run.py run --runs p40-after,p40-before --steps 3 --out $OUT/speed   (setsid on the GPU)
    python3 bench/speed_run.py wait --timeout-s 540 --copy-to $OUT/speed                      (each device call)
    python3 bench/speed_run.py report --results bench/results/speed-2026-12-02                (here, CPU only)
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lib.device_runs import audit_summary, mask_env, torch_of
from lib.real_runs import ray_stop
from verl_p40.patches.p40_run_folder import accuracy_of
from verl_p40.perf import bench as product_bench
from verl_p40.perf import projection
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions
from verl_p40.run.trainer_log import read_steps

RECIPE = "grpo-gsm8k"
FIXTURE_SHAPE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "qwen2.5-0.5b-instruct"  # config.json
# the p40 profile's sizes before the memory plan (config/profiles/p40.yaml at bf8d874)
P40_BEFORE = [
    "actor_rollout_ref.rollout.micro_batch_size=64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "critic.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    "critic.model.fsdp_config.param_offload=true",
    "critic.model.fsdp_config.optimizer_offload=true",
]
# bench/learning_run.py's fast mode before the memory plan (MODES["fast"]["sets"] at bf8d874)
HAND_SET = [
    "actor_rollout_ref.rollout.micro_batch_size=256",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
    "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
]
P40_CLI = ["--profile", "p40", "--gpu-memory-cap-gb", "24", "--skip-check", "kernels"]
# name: (Pascal mask or None, options, verl settings, validated, algorithm)
RUNS: dict[str, tuple[str | None, list[str], list[str], bool, str]] = {
    "p40-after": ("6.1", P40_CLI, [], False, RECIPE),
    "p40-before": ("6.1", P40_CLI, P40_BEFORE, False, RECIPE),
    "ppo-p40": ("6.1", P40_CLI, [], False, "ppo"),
    "h200-plain": (None, [], [], False, RECIPE),
    "h200-hand": (None, ["--profile", "ampere", "--tf32", "auto"], HAND_SET, False, RECIPE),
    "cap16": (None, ["--gpu-memory-cap-gb", "16"], [], True, RECIPE),
    "cap24": (None, ["--gpu-memory-cap-gb", "24"], [], True, RECIPE),
    "cap40": (None, ["--gpu-memory-cap-gb", "40"], [], True, RECIPE),
    # the memory plan's P40 path with the mask's op audit (every half-precision op, every SDPA kernel): not a timing
    "p40-audit": ("6.1", P40_CLI, [], False, RECIPE),
    # the P40 path decoding with transformers' generate(), as before patches/p40_decode.py (p40-after decodes with
    # the plan's default: a static KV cache and one CUDA graph a token)
    "p40-generate": ("6.1", P40_CLI, ["actor_rollout_ref.rollout.p40_decode=off"], False, RECIPE),
    "h200-generate": (None, [], ["actor_rollout_ref.rollout.p40_decode=off"], False, RECIPE),
}


def train_command(name: str, work: Path, steps: int, model: Path | None = None) -> list[str]:
    _, cli, sets, validated, algorithm = RUNS[name]
    when = (
        ["trainer.val_before_train=true"] if validated else ["trainer.val_before_train=false", "trainer.test_freq=-1"]
    )
    return [
        sys.executable,
        "-m",
        "verl_p40.cli",
        "train",
        "--algorithm",
        algorithm,
        *cli,
        "--model",
        str(model or work / "model"),
        "--data",
        str(work / "gsm8k"),
        "--checkpoints",
        str(work / name / "ckpt"),
        "--logs",
        str(work / name / "logs"),
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        *when,
        *sets,
    ]


def options_of(command: list[str]) -> tuple[RunOptions, Facts]:
    """The RunOptions and Facts a run's plan had: its command read by the product's parser, and a P40 under the mask,
    this machine's GPU otherwise (the H200 where it has none: resummarised here, every unmasked run ran on the lent
    H200)."""
    from lib.run_projection import recorded_options

    opts = recorded_options(command[3:])
    if "--skip-check" in command[4:]:
        return opts, Facts.of_card("p40")
    here = Facts.here()  # resummarised on a machine without a GPU: the lent H200 every unmasked run ran on
    return opts, (here if here.gpus else Facts.of_card("h200"))


def generation(training: list[dict], sequences: int, shape: projection.Shape, run: projection.Run) -> dict:
    """The rollout's speed in a step: generated tokens a second, and the time of one decoding step (every row one
    token) against what the P40's arithmetic and memory allow for that step (projection.py's limits)."""
    gen = statistics.median(s["timing_s/gen"] for s in training[1:] or training)
    mean = statistics.median(s["response_length/mean"] for s in training[1:] or training)
    longest = statistics.median(s["response_length/max"] for s in training[1:] or training)
    _, p40_step = projection.generation_gpu_seconds(shape, run, projection.P40)
    return {
        "seconds": round(gen, 2),
        "generated_tokens": round(mean * sequences),
        "tokens_per_s": round(mean * sequences / gen, 1),
        "decoding_steps": longest,
        "ms_per_decoding_step": round(1000 * gen / max(longest, 1.0), 2),
        "p40_gpu_ms_per_decoding_step": round(1000 * p40_step, 2),
    }


def summary(name: str, command: list[str], code: int, wall: float, log: Path | None, recorded: bool = False) -> dict:
    """The run's summary from its trainer log. `recorded`: a committed run made before issue 67's speed-ups became the
    plan's defaults, projected as it ran (run_projection.as_recorded)."""
    steps = [s for s in read_steps(log)] if log else []
    training = [s for s in steps if "timing_s/step" in s]
    out = {"run": name, "command": "verl-p40 " + shlex.join(command[4:]), "returncode": code, "wall_s": wall}
    out["setup"] = "Pascal mask (Tesla P40), op audit off" if RUNS[name][0] else "unmasked H200"
    if not training:
        return out
    if recorded:
        from lib.run_projection import as_recorded

        command = [*command[:4], *as_recorded(command[4:])]
    options, facts = options_of(command)
    run = plan(options, facts)
    model = options.model
    shape = projection.Shape.of_folder(model)
    timed = product_bench.summarise(training, run.config(), shape, _h200())
    generated = statistics.median(s.get("response_length/max", 0.0) for s in training)
    tokens = projection.measured_tokens(training, "ref" in timed["phases_s"])
    gen_run = projection.run_from_config(run.config(), generated, projection.longest_lengths(training), tokens)
    out.update(
        {
            "steps": len(training),
            "seconds_per_step": timed["seconds_per_step"],
            "step_seconds": [round(s["timing_s/step"], 1) for s in training],
            "phases_s": timed["phases_s"],
            "torch_max_allocated_gb": timed["torch_max_allocated_gb"],  # GB of 1e9 bytes, as the plan predicts
            "predicted": run.record.get("memory"),
            "validation": {int(s["step"]): a for s in steps if (a := accuracy_of(s)) is not None},
            "p40_projection": timed["projection"]["p40"],
            "pass_width": timed["projection"]["pass_width"],
            "tokens_per_phase": timed["projection"]["tokens_per_phase"],
            "p40_at_full_width": timed["projection"]["p40_at_full_width"]["step"],
            "p40_at_longest": timed["projection"]["p40_at_longest"]["step"],
            "generation": generation(training, gen_run.sequences, shape, gen_run),
            "model": model,
            "notes": [n for n in run.notes if n.startswith(("memory plan", "auto profile", "profile"))],
        }
    )
    if timed["torch_phase_peaks_gb"]:  # logs from before the phase-peak patch have none
        out["torch_phase_peaks_gb"] = timed["torch_phase_peaks_gb"]  # beside predicted's predicted_phase_peaks_gb
    return out


def _h200() -> projection.Card:
    from lib.run_projection import H200

    return H200


def run_all(args: argparse.Namespace) -> None:
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stack = torch_of()  # the torch every run of this call ran on
    (work / "pid").write_text(str(__import__("os").getpid()))
    for item in args.runs.split(","):  # NAME or NAME:STEPS
        name, _, steps = item.partition(":")
        command = train_command(name, work, int(steps or args.steps), Path(args.model) if args.model else None)
        print(f"[speed_run] {name}: $ {shlex.join(command)}", flush=True)
        ray_stop()
        audit = work / name / "audit.jsonl" if name.endswith("-audit") else None
        if audit:  # the mask writes it from the first process on: without its folder that process exits 1
            audit.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        code = subprocess.run(command, env=mask_env(RUNS[name][0], audit)).returncode
        logs = sorted((work / name / "logs").glob("train-*.log"))
        try:
            result = summary(name, command, code, round(time.time() - started, 1), logs[-1] if logs else None)
        except Exception as exc:  # the next runs still run; what went wrong is in the result
            result = {"run": name, "returncode": code, "summary_error": repr(exc)}
        result["torch"] = stack
        if audit:
            result["audit"] = audit_summary(audit)
            result["setup"] = "Pascal mask (Tesla P40), op audit on (PASCAL_MASK_AUDIT): not a timing"
        (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"[speed_run] {name}: exit {code}, {result.get('seconds_per_step')} s/step", flush=True)
        pack(work, out)
    ray_stop()
    (work / "done").touch()


def pack(work: Path, out: Path) -> None:
    """speed.tgz: every run's result and trainer log so far (what comes back from the device is a few files)."""
    import tarfile

    with tarfile.open(out / "speed.tgz.part", "w:gz") as tar:
        for path in sorted(out.glob("*.json")):
            tar.add(path, arcname=path.name)
        for path in sorted(work.glob("*/logs/train-*.log")):
            tar.add(path, arcname=f"{path.parts[-3]}-{path.name}")
    (out / "speed.tgz.part").rename(out / "speed.tgz")


def wait(args: argparse.Namespace) -> None:
    work, started = Path(args.work), time.time()
    while not (work / "done").exists() and time.time() - started < args.timeout_s:
        time.sleep(5)
    if args.copy_to:
        target = Path(args.copy_to)
        target.mkdir(parents=True, exist_ok=True)
        for path in Path(args.out).glob("speed.tgz"):
            shutil.copy(path, target / path.name)
    print("done" if (work / "done").exists() else "still running", flush=True)


def resummarise(args: argparse.Namespace) -> None:
    """Each result's summary again from its trainer log (NAME.json beside NAME-train-*.log, as pack() names them):
    what the device measured stays (command, exit code, wall time, setup, audit), what is derived is derived again
    by this checkout's projection."""
    for path in sorted(Path(args.results).glob("*.json")):
        old = json.loads(path.read_text())
        logs = sorted(path.parent.glob(f"{path.stem}-train-*.log"))
        if "command" not in old or not logs:
            continue
        command = [sys.executable, "-m", "verl_p40.cli", "train", *shlex.split(old["command"])[1:]]
        model = command[command.index("--model") + 1]
        if not Path(model, "config.json").is_file():  # the device's model folder: its shape is Qwen2.5-0.5B's
            command[command.index("--model") + 1] = str(
                Path(__file__).parents[1] / "tests/fixtures/qwen2.5-0.5b-instruct"
            )
        new = summary(old["run"], command, old["returncode"], old["wall_s"], logs[-1], recorded=True)
        new.update({k: old[k] for k in ("command", "setup", "audit", "predicted", "notes") if k in old})
        new["model"] = model
        path.write_text(json.dumps(new, indent=2) + "\n")
        print(f"{path.name}: {new.get('seconds_per_step')} s/step, P40 {new.get('p40_projection', {}).get('step')} s")


def report(args: argparse.Namespace) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(Path(args.results).glob("*.json")) if p.name != "speed.json"]
    lines = [
        "| run | setup | s a step (H200) | P40 projection | torch peak GB | predicted GB | validation |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        predicted = (r.get("predicted") or {}).get("predicted_peak_gb")
        val = ", ".join(f"{k}: {100 * v:.1f} %" for k, v in (r.get("validation") or {}).items()) or "-"
        p40 = (r.get("p40_projection") or {}).get("step") if r["setup"].startswith("Pascal") else "-"
        lines.append(
            f"| {r['run']} | {r['setup']} | {r.get('seconds_per_step')} | {p40}"
            f" | {r.get('torch_max_allocated_gb')} | {predicted} | {val} |"
        )
    text = "\n".join(lines) + "\n"
    Path(args.results, "speed.md").write_text(text)
    print(text, end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "wait", "report", "resummarise"))
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work", default="/tmp/speed")
    parser.add_argument("--model", help="the model folder (default: WORK/model, the random weights)")
    parser.add_argument("--out", default="/tmp/speed/out")
    parser.add_argument("--timeout-s", type=float, default=540)
    parser.add_argument("--copy-to")
    parser.add_argument("--results", default="bench/results/speed-2026-12-02")
    args = parser.parse_args()
    {"run": run_all, "wait": wait, "report": report, "resummarise": resummarise}[args.action](args)


if __name__ == "__main__":
    main()
