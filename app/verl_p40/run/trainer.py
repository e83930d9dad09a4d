"""`verl-p40 train`'s trainer process: `python -m verl.trainer.main_ppo <overrides>` of a RunPlan, its output streamed
to the console and to a log file, a graceful stop on the first SIGTERM or SIGINT, and the one-line diagnosis of a
failed run."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from verl_p40 import defaults
from verl_p40.models.checkpoints import resume_line
from verl_p40.plan.planner import RunPlan
from verl_p40.plan.verlconfig import hydra_value
from verl_p40.run import lock
from verl_p40.run.failures import Diagnosis
from verl_p40.run.trainer_log import ValidationWatch


def worker_free(environ: os._Environ | dict) -> dict[str, str]:
    """The environment without the settings verl_p40.memcap applies in the workers (memory cap, TF32, cuDNN
    attention): those come from the run's plan only, so a variable left over in the shell (a TF32 switch exported
    on another card) never reaches a P40 plan's workers."""
    return {k: v for k, v in environ.items() if not defaults.is_worker_setting(k)}


def run_trainer(run: RunPlan, logs: str) -> int:
    """Run verl's trainer, copy its output into logs/train-<time>.log, and stop it gracefully: the first SIGTERM or
    SIGINT asks the training loop (patched: trainer.stop_file) to save the step in progress and end; a second one
    stops the trainer at once."""
    log_dir = Path(logs).expanduser()
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_path = log_dir / f"train-{stamp}.log"
    stop_file = log_dir.absolute() / f".stop-requested-{stamp}"
    stop_file.unlink(missing_ok=True)
    env = {**worker_free(os.environ), **run.env, "PYTHONUNBUFFERED": "1"}
    overrides = [
        *run.overrides,
        f"hydra.run.dir={log_dir.absolute()}/hydra/{stamp}",
        f"+trainer.stop_file={hydra_value(str(stop_file))}",
    ]
    print(f"[verl-p40] logging to {log_path}", flush=True)
    record = getattr(run, "record", {})  # a stand-in plan may have none
    experiment = record.get("checkpoints")
    locks = (lock.train_lock(experiment),) if experiment else ()  # the trainer keeps the folder's lock while it lives
    if experiment and record.get("resume_mode", "auto") != "disable":  # where the run starts, in one line
        print(f"[verl-p40] {resume_line(Path(experiment))}", file=sys.stderr, flush=True)
    # line-buffered: whoever follows the log (tail -f, a bench that stops the run at a step) sees each line as
    # verl prints it, not 8 KB later
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        log.write("$ " + shlex.join(run.command()) + "\n")
        child = subprocess.Popen(
            [*run.command()[:3], *overrides],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            pass_fds=locks,
        )

        def stop(signum, _frame):
            if not stop_file.exists():
                stop_file.touch()
                print(
                    "[verl-p40] stop requested: the trainer finishes this step, saves a checkpoint and exits "
                    "(the same signal again stops it at once)",
                    file=sys.stderr,
                    flush=True,
                )
                return
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        diagnosis = Diagnosis()
        watch = ValidationWatch(run.validation_questions)
        try:
            assert child.stdout is not None
            for line in child.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(line)
                diagnosis.feed(line)
                fell = watch.feed(line)
                if fell:
                    print(f"[verl-p40] {fell}", file=sys.stderr, flush=True)
                    log.write(f"[verl-p40] {fell}\n")
            code = child.wait()
            said = diagnosis.summary() if code != 0 else None
            if said:  # the one line to end a page of Ray tracebacks with
                print(f"verl-p40 train: error: {said} (full output: {log_path})", file=sys.stderr, flush=True)
                log.write(f"verl-p40 train: error: {said}\n")
                return 2
            if code == 0 and stop_file.exists():
                print(
                    "[verl-p40] stopped on request with the last step saved; the same command resumes from it",
                    file=sys.stderr,
                    flush=True,
                )
            return code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            stop_file.unlink(missing_ok=True)
