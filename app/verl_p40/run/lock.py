"""One trainer per checkpoints folder: `verl-p40 train` holds an exclusive flock on `<experiment>/.verl-p40-train.lock`
for as long as it and verl's trainer run (the trainer inherits the descriptor), so a second trainer on the same
folder (`docker compose run trainer`, another compose project, a second `verl-p40 train`) is refused in one line
instead of writing the same checkpoints. The kernel drops the lock when the last process holding it dies, a SIGKILL
or a power cut included: there is no stale lock to remove by hand."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from verl_p40 import UserError

LOCK = ".verl-p40-train.lock"
_held: dict[str, int] = {}  # experiment folder -> the descriptor holding its lock, for this process's lifetime


def train_lock(experiment: str | Path) -> int:
    """Take the folder's lock (idempotent within a process); the descriptor, to hand to the trainer process."""
    folder = Path(experiment).absolute()
    if str(folder) in _held:
        return _held[str(folder)]
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise UserError(
            f"{folder}: another trainer is training into this folder ({holder}); wait for it to end or stop it "
            "(docker compose stop trainer), or train into another one with --set trainer.experiment_name=NEW"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
    _held[str(folder)] = fd
    return fd


def held() -> tuple[int, ...]:
    """The descriptors of the locks this process holds (a child given them keeps the locks while it lives)."""
    return tuple(_held.values())
