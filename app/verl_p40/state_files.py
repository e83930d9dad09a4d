"""The files verl-p40 writes and reads back later (verl's tracker, prep's manifest, the run record, an output folder's
ledger, eval's answers): read whole and checked as they are read. What is wrong with one (not there is not wrong: None)
is said in words a line can carry, naming neither file nor fix (the caller knows both): bytes that are not UTF-8, JSON
cut short or edited, JSON of another shape. Never a traceback, and never read as "nothing there"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from verl_p40 import UserError

_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def read_text(path: Path) -> tuple[str | None, str | None]:
    """(its text, None); (None, None) when there is no such file; (None, what is wrong)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None, None
    except IsADirectoryError:
        return None, "a folder, not a file"
    except OSError as exc:
        return None, f"cannot read it ({exc.strerror or exc})"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"


def kind_of(value: Any) -> str:
    return "null" if value is None else _KINDS.get(type(value), type(value).__name__)


def read_json(path: Path, kind: type = dict) -> tuple[Any, str | None]:
    """(its value, None) when it is whole JSON of `kind`; (None, None) when there is no such file; (None, what is
    wrong)."""
    text, problem = read_text(path)
    if text is None:
        return None, problem
    if not text.strip():
        return None, "empty"
    try:
        value = json.loads(text)
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:
        at = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "its text"
        return None, f"not whole JSON ({exc.msg.lower() if hasattr(exc, 'msg') else exc} at {at}: cut short or edited)"
    if not isinstance(value, kind):
        return None, f"holds {kind_of(value)}, not {_KINDS[kind]}"
    return value, None


def load_json(path: Path, fix: str, kind: type = dict) -> Any:
    """`read_json`'s value (None when there is no such file), or the one line naming `path`, what is wrong and `fix`."""
    value, problem = read_json(path, kind)
    if problem:
        raise UserError(f"{path}: {problem}; {fix}")
    return value
