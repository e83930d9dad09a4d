"""Read the per-step metrics verl's console logger prints (`step:N - key:value - ...`) back from a log file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from verl_p40.patches.p40_run_folder import VALIDATION_KEY

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


class ValidationWatch:
    """Says so, in one line, when the validation accuracy falls clearly below where the run started: more than two
    standard errors of the first validation's `questions` answers (a recipe that unlearns, like the learning issue's
    first one, shows it here before any test-split evaluation)."""

    def __init__(self, questions: int | None):
        self.questions = questions
        self.first: tuple[int, float] | None = None
        self.said = False

    def feed(self, line: str) -> str | None:
        record = parse_line(line)
        if record is None or VALIDATION_KEY not in record:
            return None
        step, value = int(record["step"]), record[VALIDATION_KEY]
        if self.first is None:
            self.first = (step, value)
            return None
        start_step, start = self.first
        error = (max(start * (1 - start), 1e-6) / self.questions) ** 0.5 if self.questions else 0.0
        if self.said or value >= start - 2 * error:
            return None
        self.said = True
        return (
            f"validation accuracy fell: {start:.1%} at step {start_step} -> {value:.1%} at step {step}"
            + (f" ({self.questions} questions, more than 2 standard errors)" if self.questions else "")
            + "; the run is unlearning: stop it (the last checkpoint before the fall is kept) and change the recipe"
        )
