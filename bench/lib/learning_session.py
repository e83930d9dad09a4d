"""The learning bench's GPU phases that train (bench/learning_run.py): `session` (the trainer under a time budget, then
the held-out evaluation or, with --no-eval, the report) and `audit` (one step on the P40 path with the op audit on)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from lib.device_runs import mask_env, torch_of
from lib.learning_heldout import bundle, final
from lib.learning_recipe import MODES, train_command
from lib.learning_report import report
from lib.real_runs import State, cli, ray_stop
from verl_p40.run.trainer_log import read_steps


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
        state.data["gpu_name"] = _gpu_name()
        state.data["torch"] = torch_of(env)  # here, on the GPU machine: report and horizon may run elsewhere
        command = train_command(args, work)
        print("$ " + shlex.join(command), flush=True)
        started = time.time()
        code, stop_sent = _train_under_budget(args, work, command, env, started)
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


def _gpu_name() -> str:
    """The first GPU's name as nvidia-smi says it."""
    return (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown GPU"
    )


def _train_under_budget(
    args: argparse.Namespace, work: Path, command: list[str], env: dict, started: float
) -> tuple[int, float | None]:
    """The trainer run to its end, sent one SIGTERM (a graceful stop) when the budget would run out or the stop file
    appears: (its exit code, the seconds after `started` the stop was sent, or None)."""
    stop_sent = None
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
    return proc.wait(), stop_sent


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
