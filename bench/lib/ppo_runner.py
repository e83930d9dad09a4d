"""Run `verl-p40 train` under the GPU monitor's sampler and summarise verl's per-step metrics (the GPU benches)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from verl_p40.run.trainer_log import read_steps

PHASES = ("gen", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "step")


def run_arguments(work: str, steps: int) -> argparse.ArgumentParser:
    """The options every bench script that runs verl-p40 train shares."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--work", default=work)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--cap-gb", type=float, default=24)
    return parser


def run_train(name: str, train_args: list[str], logs: Path, timeout: float, env: dict | None = None) -> dict:
    """`verl-p40 train` with `train_args` (in `env`, default this process's), its NVML peaks and verl's step metrics."""
    logs.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "verl_p40.cli", "train", "--logs", str(logs), *train_args]
    print(f"== {name}: {shlex.join(cmd)}", flush=True)
    from verl_p40.perf.bench import Sampler

    started = time.time()
    with Sampler(logs / "gpu") as sampler:  # the GPU monitor's own sampling: every GPU, every process
        try:
            rc = subprocess.run(cmd, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.time() - started
    peaks = sampler.peaks()
    nvml = {
        "nvml_peak_device_used_gb": max(peaks["nvml_peak_device_gb"].values(), default=0.0),
        "nvml_peak_process_used_gb": peaks["nvml_peak_process_gb"],
    }
    found = sorted(logs.glob("train-*.log"))  # none when the command stopped before the trainer started
    log = found[-1] if found else None
    steps = read_steps(log) if log else []
    return {
        "name": name,
        "returncode": rc,
        "wall_s": round(wall, 1),
        "command": "verl-p40 " + shlex.join(cmd[3:]),
        "log": str(log) if log else None,
        **nvml,
        "steps": steps,
        "summary": summarise(steps, train_args),
    }


def summarise(steps: list[dict], train_args: list[str]) -> dict:
    if not steps:
        return {}
    timed = steps[1:] or steps  # the first step carries warm-up; report the rest
    mean = lambda key: round(sum(s.get(key, 0.0) for s in timed) / len(timed), 3)  # noqa: E731
    batch = next((int(a.split("=")[1]) for a in train_args if a.startswith("data.train_batch_size=")), None)
    step_s = mean("timing_s/step")
    return {
        "steps": len(steps),
        "mean_over_steps": [int(s["step"]) for s in timed],
        **{f"mean_{p}_s": mean(f"timing_s/{p}") for p in PHASES},
        "tokens_per_s": mean("perf/throughput"),
        "prompts_per_s": round(batch / step_s, 3) if batch and step_s else None,
        "peak_torch_max_allocated_gb": max(s.get("perf/max_memory_allocated_gb", 0.0) for s in steps),
        "peak_torch_max_reserved_gb": max(s.get("perf/max_memory_reserved_gb", 0.0) for s in steps),
        "score_first": steps[0].get("critic/score/mean"),
        "score_last": steps[-1].get("critic/score/mean"),
    }


def environment() -> dict:
    import torch
    import transformers
    import verl

    gpu = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name(0) if gpu else "none (CPU rehearsal)",
        "gpu_total_memory_gb": round(torch.cuda.get_device_properties(0).total_memory / 1e9, 2) if gpu else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "verl": getattr(verl, "__version__", "0.5.0"),
        "python": sys.version.split()[0],
        "hostname_note": "lent NVIDIA H200; P40 emulated by the p40 profile plus --gpu-memory-cap-gb",
        "date": time.strftime("%Y-%m-%d"),
        "invocation": shlex.join([sys.executable, *sys.argv]),
        "cwd": os.getcwd(),
    }
