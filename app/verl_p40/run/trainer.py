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
from verl_p40.run import status
from verl_p40.run.console import Console
from verl_p40.run.failures import Diagnosis
from verl_p40.run.progress import Progress, Schedule
from verl_p40.run.trainer_log import ValidationWatch


def worker_free(environ: os._Environ | dict) -> dict[str, str]:
    """The environment without the settings verl_p40.memcap applies in the workers (memory cap, TF32, cuDNN
    attention): those come from the run's plan only, so a variable left over in the shell (a TF32 switch exported
    on another card) never reaches a P40 plan's workers."""
    return {k: v for k, v in environ.items() if not defaults.is_worker_setting(k)}


def run_trainer(run: RunPlan, logs: str, locks: tuple[int, ...] = ()) -> int:
    """Run verl's trainer, copy its output into logs/train-<time>.log, and stop it gracefully: the first SIGTERM or
    SIGINT asks the training loop (patched: trainer.stop_file) to save the step in progress and end; a second one
    stops the trainer at once. `locks`: the checkpoints folder's lock (`run/sequence.py` takes it), which the trainer
    inherits and keeps while it lives."""
    files = _RunFiles.under(logs)
    print(
        f"[verl-p40] logging to {files.log} (verl's config and model dumps go there only); a line a step here, and "
        f"in {status.path_in(logs)} (verl-p40 status)",
        flush=True,
    )
    _say_where(getattr(run, "record", {}))  # a stand-in plan may have none
    watcher = _Watcher(logs, files.log, schedule_of(run), ValidationWatch(run.validation_questions))
    # line-buffered: whoever follows the log (tail -f, a bench that stops the run at a step) sees each line as
    # verl prints it, not 8 KB later
    with open(files.log, "a", encoding="utf-8", buffering=1) as log:
        log.write("$ " + shlex.join(run.command()) + "\n")
        child = _start(run, files, locks)
        stop = _GracefulStop(files.stop, child)
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        code: int | None = None
        try:
            with status.heartbeat(logs):  # `verl-p40 status` tells a dead trainer from a slow step by it
                code = _follow(child, log, watcher)
            if code == 0 and files.stop.exists():
                _say("stopped on request with the last step saved; the same command resumes from it")
            return code
        finally:
            watcher.end(code, stopped=files.stop.exists())
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


def _say_where(record: dict) -> None:
    """One line saying where the run starts: its newest complete checkpoint, or the start."""
    experiment = record.get("checkpoints")
    if experiment and record.get("resume_mode", "auto") != "disable":
        _say(resume_line(Path(experiment)))


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


def schedule_of(run: RunPlan) -> Schedule:
    """The steps, validations and saves the plan's config asks verl for (a stand-in plan may have no config; verl's
    own `Total training steps: N` line gives the steps then)."""
    if not hasattr(run, "config"):
        return Schedule()
    trainer = run.config().trainer
    total = trainer.get("total_training_steps")
    return Schedule(
        int(total) if total else None, int(trainer.get("test_freq") or 0), int(trainer.get("save_freq") or 0)
    )


class _Watcher:
    """What the parent makes of the trainer's output: the console (without the dumps), the progress line a step (on
    the console, in the log and in the status file), the fall of the validation accuracy, and why a run failed."""

    def __init__(self, logs: str, log_path: Path, schedule: Schedule, watch: ValidationWatch):
        self.logs, self.log_path, self.watch = logs, log_path, watch
        self.console, self.diagnosis, self.progress = Console(), Diagnosis(), Progress(schedule)
        self.failure: str | None = None
        status.write_run(
            logs, state="starting", started=status.now(), log=str(log_path), total_steps=schedule.total_steps
        )

    def feed(self, line: str, log) -> None:
        if self.console.shows(line):
            sys.stdout.write(line)
            sys.stdout.flush()
        self.diagnosis.feed(line)
        fell = self.watch.feed(line)
        if fell:
            _say(fell)
            log.write(f"[verl-p40] {fell}\n")
        snapshot = self.progress.feed(line)
        if snapshot is not None:
            said = snapshot.line()
            _say(said)
            log.write(f"[verl-p40] {said}\n")
            status.write_run(self.logs, state="running", progress=said, **snapshot.as_dict())

    def end(self, code: int | None, stopped: bool) -> None:
        """The run's last state in the status file: ended, stopped (on request) or failed, with its exit code and
        line."""
        last = self.progress.last
        progress = last.line(final=True) if last else None
        if code == 0:
            state = "stopped" if stopped or self.progress.stopped_after is not None else "ended"
            status.write_run(self.logs, state=state, ended=status.now(), exit_code=0, progress=progress)
            return
        line = (
            self.failure
            or self.progress.error_line
            or ("verl-p40 train was interrupted" if code is None else f"the trainer exited with code {code}")
        )
        status.write_run(self.logs, state="failed", ended=status.now(), exit_code=code, line=line, progress=progress)


def _follow(child: subprocess.Popen, log, watcher: _Watcher) -> int:
    """Copy the trainer's output to the log, and all but its dumps to the console, until it ends; its exit code, or
    2 with the one line that ends a page of Ray tracebacks."""
    assert child.stdout is not None
    for line in child.stdout:
        log.write(line)
        watcher.feed(line, log)
    code = child.wait()
    said = watcher.diagnosis.summary() if code != 0 else None
    if said:
        watcher.failure = said
        print(f"verl-p40 train: error: {said} (full output: {watcher.log_path})", file=sys.stderr, flush=True)
        log.write(f"verl-p40 train: error: {said}\n")
        return 2
    return code
