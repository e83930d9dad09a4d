"""The one run sequence of `train`, `bench` and `cluster head`: plan -> its notes -> the resume check -> the
preflight -> the checkpoints folder's lock -> the run record -> verl's trainer.

The machine is read once by the command (`Facts`) and handed to the plan and to the preflight. What differs between
the commands is a `Launch`:
- `preflight`: the doctor's checks of the plan on that machine, each command with its own skips (the doctor is the
  stage above this one, so the command hands its checks in).
- `record`: the run record beside the checkpoints (`verl-p40-run.json`, what a resume and `eval`/`export` read back).
  `bench` keeps none: it saves no checkpoint (`trainer.save_freq=-1`) into a work folder it removes, so a record of
  how the checkpoints were made would describe nothing and be removed unread.
- `dry_run`: stop after the preflight (no lock, no record, no trainer): `train --dry-run` prints the command.

The resume check is the same for every command: the plan's `trainer.resume_mode` decides it (bench's plan disables
resuming, so the check passes a fresh folder through). The lock is taken once, here, before the record is written,
and handed to the trainer process, which keeps it while it lives.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from verl_p40.models.checkpoints import check_resume, finished_run, write_run_record
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import RunPlan, plan
from verl_p40.plan.run_options import RunOptions
from verl_p40.run import lock, trainer


@dataclass(frozen=True)
class Launch:
    """How a command runs the sequence (see the module's doc)."""

    preflight: Callable[[RunPlan, Facts], None]
    record: bool = True
    dry_run: bool = False


@dataclass(frozen=True)
class Ready:
    """A run planned, checked and locked: `train` starts verl's trainer. `finished`: the line saying the run has
    nothing left to train (nothing was checked or locked then)."""

    plan: RunPlan
    finished: str | None = None
    lock: int | None = None

    def train(self, logs: str) -> int:
        return trainer.run_trainer(self.plan, logs, () if self.lock is None else (self.lock,))


def say(line: str) -> None:
    print(f"[verl-p40] {line}", file=sys.stderr, flush=True)


def prepare(options: RunOptions, facts: Facts, launch: Launch) -> Ready:
    """Everything before verl's trainer starts, in the order a run meets it."""
    run = plan(options, facts)
    for note in run.notes:
        say(note)
    check_resume(run.record)
    if finished := finished_run(run.record):  # verl would resume it and train one step past its end
        return Ready(run, finished=finished)
    launch.preflight(run, facts)
    if launch.dry_run:
        return Ready(run)
    held = lock.train_lock(run.record["checkpoints"])  # a second trainer on these checkpoints is refused here
    if launch.record:
        write_run_record(run.record)
    return Ready(run, lock=held)


def run(options: RunOptions, facts: Facts, launch: Launch, logs: str) -> int:
    """The whole sequence (`train`, `cluster head`): the trainer's exit code; 0 for a run already finished."""
    ready = prepare(options, facts, launch)
    if ready.finished:
        say(ready.finished)
        return 0
    if launch.dry_run:
        print(ready.plan.shell())
        return 0
    return ready.train(logs)
