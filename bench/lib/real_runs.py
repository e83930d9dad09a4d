"""What the real-weights runs share (bench/experiments/real_weights.py, learning_run.py, export check): the product's
CLI as a command, the real-weights proxy model, the runs' state file, Ray cleared after a kill, a detached session
followed to its end, and the GPU monitor's peaks."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from verl_p40.patches.p40_run_folder import accuracy_of
from verl_p40.run.trainer_log import read_steps

DEVICE = Path(__file__).resolve().parents[1] / "device"  # the device-staging scripts (gguf_to_hf.py)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "verl_p40.cli", *args]


def run(cmd: list[str]) -> None:
    print("$ " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def real_model(gguf: str, tokenizer: str, model: Path) -> None:
    """The real-weights proxy as a Hugging Face folder at `model` (bench/device/gguf_to_hf.py), unless it is there."""
    if not (model / "config.json").is_file():
        run(
            [
                sys.executable,
                str(DEVICE / "gguf_to_hf.py"),
                "--gguf",
                gguf,
                "--tokenizer",
                tokenizer,
                "--out",
                str(model),
            ]
        )


class State:
    """The phases' results, kept beside the work files (and copied to --out after every phase)."""

    def __init__(self, work: Path, copy_name: str = "real-weights-state.json"):
        self.path, self.copy_name = work / "state.json", copy_name
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {"train_runs": []}

    def save(self, out: Path) -> None:
        self.path.write_text(json.dumps(self.data, indent=2) + "\n")
        shutil.copy(self.path, out / self.copy_name)


def ray_stop() -> None:
    """Clear what a killed trainer's own Ray left behind; a cluster someone else started (RAY_ADDRESS) stays."""
    if os.environ.get("RAY_ADDRESS"):
        return
    subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def session_alive(work: Path) -> bool:
    pid_file = work / "session.pid"
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (ProcessLookupError, ValueError):
        return False
    return True


def wait(args: argparse.Namespace, work: Path) -> None:
    """Follow a detached `session` for at most --timeout-s: print each new step's reward, return when it ends."""
    deadline, seen = time.time() + args.timeout_s, None
    while True:
        alive = session_alive(work)
        logs = sorted((work / "logs").glob("train-*.log"))
        steps = read_steps(logs[-1]) if logs else []
        if steps and steps[-1]["step"] != seen:
            seen = steps[-1]["step"]
            last = steps[-1]
            extra = "".join(
                f", {label} {value:.3f}"
                for label, value in (
                    ("correct", last.get("reward/acc/mean")),
                    ("validation", accuracy_of(last)),
                    ("s/step", last.get("timing_s/step")),
                )
                if value is not None
            )
            print(
                f"[wait] {logs[-1].name} step {int(seen)}: training reward "
                f"{last.get('critic/score/mean', float('nan')):.3f}{extra}",
                flush=True,
            )
        if not alive or time.time() > deadline:
            print(f"[wait] session {'still running' if alive else 'ended'}", flush=True)
            if getattr(args, "copy_to", None):
                copy_partial(work, Path(args.copy_to))
            return
        time.sleep(5)


def copy_partial(work: Path, target: Path) -> None:
    """The session's logs and state as they are now (no checkpoints) into `target`, e.g. under the device call's $OUT:
    a machine lost before the session ends still leaves every step logged until this call."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(work.rglob("*")):
        relative = path.relative_to(work)
        if path.is_file() and not any(part.startswith("ckpt") for part in relative.parts):
            if relative.parts[0] in ("logs", "session.log", "state.json"):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / relative)
    print(f"[wait] logs so far copied to {target}", flush=True)


def monitor_peaks(folder: Path, cap_gb: float | None = 24.0) -> dict:
    """Peaks over every train run from `verl-p40 monitor`'s CSVs (the whole GPU, and the largest process); `cap_gb`:
    the memory cap the run had (None: none)."""
    from verl_p40.gpu.csv_log import read_gpu_csv, read_process_csv
    from verl_p40.gpu.monitor import Summary

    if not (folder / "gpu.csv").is_file():
        return {"note": f"no GPU monitor samples in {folder}"}
    summary = Summary()
    summary.add(read_gpu_csv(folder / "gpu.csv"), read_process_csv(folder / "gpu-processes.csv"))
    peaks = summary.as_dict()
    return {
        "device_used_peak_gb": max(g["peak_memory_used_gb"] for g in peaks["gpus"].values()),
        "process_used_peak_gb": round(peaks["processes"][0]["peak_used_memory_bytes"] / 1e9, 3),
        "cap_gb": cap_gb,
        "source": "verl-p40 monitor, 1 s samples, every train run",
    }
