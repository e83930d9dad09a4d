"""Graceful stop on the GPU: SIGTERM to `verl-p40 train` (p40 profile, 24 GB cap, Pascal mask, random weights of
Qwen2.5-0.5B's shape) once step 2 is logged, then the same command again. Records how long the stop took, verl's
own save time of the step in progress, the checkpoint it left and the step the resume started with.

Run on the GPU machine after `bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh`:
    python3 bench/experiments/stop_resume.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from lib.device_runs import mask_env
from verl_p40.run.trainer_log import read_steps

WORK = Path("/tmp/stop-resume")
STEPS, STOP_AFTER = 4, 2


def command() -> list[str]:
    return [
        sys.executable,
        "-m",
        "verl_p40.cli",
        "train",
        "--profile",
        "p40",
        "--gpu-memory-cap-gb",
        "24",
        "--model",
        "/tmp/qwen-random",
        "--data",
        "/tmp/gsm8k",
        "--logs",
        str(WORK / "logs"),
        "--checkpoints",
        str(WORK / "ckpt"),
        f"trainer.total_training_steps={STEPS}",
    ]


def latest_iteration() -> int | None:
    marker = next(WORK.glob("ckpt/*/latest_checkpointed_iteration.txt"), None)
    return int(marker.read_text().strip()) if marker else None


def one_run(stop_after: int | None, timeout: float) -> dict:
    logs = WORK / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    before = set(logs.glob("train-*.log"))
    started = time.time()
    with open(WORK / "console.log", "a") as console:
        proc = subprocess.Popen(command(), env=mask_env("6.1"), stdout=console, stderr=subprocess.STDOUT)
        signalled = None
        while proc.poll() is None and time.time() - started < timeout:
            time.sleep(1)
            new = sorted(set(logs.glob("train-*.log")) - before)
            steps = read_steps(new[-1]) if new else []
            if stop_after is not None and signalled is None and steps and int(steps[-1]["step"]) >= stop_after:
                proc.send_signal(signal.SIGTERM)
                signalled = time.time()
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
    ended = time.time()
    log = sorted(set(logs.glob("train-*.log")) - before)[-1]
    steps = read_steps(log)
    text = log.read_text(errors="replace")
    return {
        "log": log.name,
        "exit_code": code,
        "wall_s": round(ended - started, 1),
        "sigterm_after_step": stop_after,
        "sigterm_to_exit_s": round(ended - signalled, 1) if signalled else None,
        "steps_logged": [int(s["step"]) for s in steps],
        "step_s": {int(s["step"]): round(float(s.get("timing_s/step", 0)), 2) for s in steps},
        "save_checkpoint_s": {
            int(s["step"]): round(float(s["timing_s/save_checkpoint"]), 2)
            for s in steps
            if "timing_s/save_checkpoint" in s
        },
        "stopped_on_request_line": next((line for line in text.splitlines() if "stopped on request" in line), None),
        "latest_checkpointed_iteration": latest_iteration(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stopped = one_run(STOP_AFTER, timeout=260)
    resumed = one_run(None, timeout=220)
    lost = (resumed["steps_logged"][0] - 1 - stopped["steps_logged"][-1]) if resumed["steps_logged"] else None
    result = {
        "command": "verl-p40 " + " ".join(command()[3:]),
        "mask": {"cc": "6.1", "cap_gb": 24},
        "stopped": stopped,
        "resumed": resumed,
        "steps_redone": (stopped["steps_logged"][-1] - resumed["steps_logged"][0] + 1)
        if resumed["steps_logged"]
        else None,
        "steps_lost": lost,
    }
    (args.out / "stop-resume.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    subprocess.run(["tar", "-czf", str(args.out / "logs-stop-resume.tgz"), "-C", str(WORK), "logs", "console.log"])


if __name__ == "__main__":
    main()
