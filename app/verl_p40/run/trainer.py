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
    files = _RunFiles.under(logs)
    print(f"[verl-p40] logging to {files.log}", flush=True)
    locks = _lock_and_say_where(getattr(run, "record", {}))  # a stand-in plan may have none
    # line-buffered: whoever follows the log (tail -f, a bench that stops the run at a step) sees each line as
    # verl prints it, not 8 KB later
    with open(files.log, "a", encoding="utf-8", buffering=1) as log:
        log.write("$ " + shlex.join(run.command()) + "\n")
        child = _start(run, files, locks)
        stop = _GracefulStop(files.stop, child)
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = _follow(child, log, ValidationWatch(run.validation_questions), Diagnosis(), files.log)
            if code == 0 and files.stop.exists():
                _say("stopped on request with the last step saved; the same command resumes from it")
            return code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            files.stop.unlink(missing_ok=True)


def _say(line: str) -> None:
    print(f"[verl-p40] {line}", file=sys.stderr, flush=True)


class _RunFiles:
    """The run's log file and the file whose existence asks the training loop to stop, both named by the start time."""

    def __init__(self, folder: Path, stamp: str):
        self.folder, self.stamp = folder, stamp
        self.log = folder / f"train-{stamp}.log"
        self.stop = folder.absolute() / f".stop-requested-{stamp}"

    @classmethod
    def under(cls, logs: str) -> _RunFiles:
        folder = Path(logs).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        files = cls(folder, time.strftime("%Y%m%d-%H%M%S"))
        files.stop.unlink(missing_ok=True)
        return files


def _lock_and_say_where(record: dict) -> tuple[int, ...]:
    """The checkpoints folder's lock (the trainer keeps it while it lives), and one line saying where the run starts."""
    experiment = record.get("checkpoints")
    if not experiment:
        return ()
    locks = (lock.train_lock(experiment),)
    if record.get("resume_mode", "auto") != "disable":
        _say(resume_line(Path(experiment)))
    return locks


def _start(run: RunPlan, files: _RunFiles, locks: tuple[int, ...]) -> subprocess.Popen:
    env = {**worker_free(os.environ), **run.env, "PYTHONUNBUFFERED": "1"}
    overrides = [
        *run.overrides,
        f"hydra.run.dir={files.folder.absolute()}/hydra/{files.stamp}",
        f"+trainer.stop_file={hydra_value(str(files.stop))}",
    ]
    return subprocess.Popen(
        [*run.command()[:3], *overrides],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
        pass_fds=locks,
    )


class _GracefulStop:
    """The signal handler: the first signal asks for a stop after this step's save, a second one stops at once."""

    def __init__(self, stop_file: Path, child: subprocess.Popen):
        self.stop_file, self.child = stop_file, child

    def __call__(self, signum: int, _frame) -> None:
        if not self.stop_file.exists():
            self.stop_file.touch()
            _say(
                "stop requested: the trainer finishes this step, saves a checkpoint and exits "
                "(the same signal again stops it at once)"
            )
            return
        try:
            os.killpg(self.child.pid, signum)
        except ProcessLookupError:
            pass


def _follow(child: subprocess.Popen, log, watch: ValidationWatch, diagnosis: Diagnosis, log_path: Path) -> int:
    """Copy the trainer's output to the console and the log until it ends; its exit code, or 2 with the one line
    that ends a page of Ray tracebacks."""
    assert child.stdout is not None
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        diagnosis.feed(line)
        fell = watch.feed(line)
        if fell:
            _say(fell)
            log.write(f"[verl-p40] {fell}\n")
    code = child.wait()
    said = diagnosis.summary() if code != 0 else None
    if said:
        print(f"verl-p40 train: error: {said} (full output: {log_path})", file=sys.stderr, flush=True)
        log.write(f"verl-p40 train: error: {said}\n")
        return 2
    return code
