"""The files verl-p40 writes and reads back later (verl's tracker, prep's manifest, the run record, an output folder's
ledger, eval's answers): read whole and checked as they are read, by the reading of `patches/p40_run_folder.py`
(standard library only, so that verl's trainer process reads the run's folder the same way). What is wrong with one
(not there is not wrong: None) is said in words a line can carry, naming neither file nor fix (the caller knows both):
bytes that are not UTF-8, JSON cut short or edited, JSON of another shape. Never a traceback, and never read as
"nothing there"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl_p40 import UserError
from verl_p40.patches.p40_run_folder import kind_of, read_json, read_text

__all__ = ["kind_of", "load_json", "read_json", "read_text"]


def load_json(path: Path, fix: str, kind: type = dict) -> Any:
    """`read_json`'s value (None when there is no such file), or the one line naming `path`, what is wrong and `fix`."""
    value, problem = read_json(path, kind)
    if problem:
        raise UserError(f"{path}: {problem}; {fix}")
    return value
