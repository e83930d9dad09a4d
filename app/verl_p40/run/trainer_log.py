"""Read the per-step metrics verl's console logger prints (`step:N - key:value - ...`) back from a log file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

_STEP_LINE = re.compile(r"step:(\d+) - (.*)$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")  # verl 0.5.0 prints numpy scalars as np.float64(0.5)
_NON_FINITE = ("nan", "inf", "-inf")  # how Python prints them (np.float64(nan) too)


def parse_line(line: str) -> dict[str, float] | None:
    """The metrics of one console line, with "step"; None for any other line (Ray prefixes are fine)."""
    match = _STEP_LINE.search(line.rstrip("\n"))
    if not match:
        return None
    out: dict[str, float] = {"step": int(match.group(1))}
    for part in match.group(2).split(" - "):
        key, sep, value = part.partition(":")
        if not sep:
            continue
        value = value.strip()
        numpy_scalar = _NUMPY_SCALAR.match(value)
        if numpy_scalar:
            value = numpy_scalar.group(1)
        if value.lower() in _NON_FINITE:  # a NaN gradient norm is a result, not a parse failure: keep it
            out[key.strip()] = float(value)
            continue
        try:
            number = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            continue
        if isinstance(number, (int, float)):
            out[key.strip()] = float(number)
    return out


def read_steps(path: str | Path) -> list[dict[str, float]]:
    """Every step logged in `path`; a step logged twice (a resumed run) keeps its last record."""
    steps: dict[int, dict[str, float]] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            record = parse_line(line)
            if record is not None:
                steps[int(record["step"])] = record
    return [steps[k] for k in sorted(steps)]
