"""The matrix as a whole: wide enough (issue 32 asks for at least 150 cases) and across every command of the CLI (each
case asserts that its refusal leaves no file nor folder behind: bad_inputs/conftest.py)."""

from __future__ import annotations

import importlib
from pathlib import Path

from verl_p40.cli import COMMANDS

HERE = Path(__file__).resolve().parent


def all_cases() -> list[tuple]:
    cases = []
    for path in sorted(HERE.glob("test_matrix*.py")):
        if path.stem != "test_matrix_size":
            cases += getattr(importlib.import_module(f"bad_inputs.{path.stem}"), "CASES", [])
    return cases


def test_the_matrix_is_wide_and_names_are_unique():
    cases = all_cases()
    assert len(cases) >= 150
    assert len({c[0] for c in cases}) == len(cases)
    commands = {c[1][0] for c in cases}
    assert commands >= {command.name for command in COMMANDS}  # every command's refusals, each leaving nothing behind
    # every compose entrypoint that runs verl-p40 (tensorboard.sh runs TensorBoard itself; ray-head.sh would start
    # Ray here: its bad values are the `cluster head` cases)
    scripts = {p.name for p in (HERE.parents[1] / "entrypoints").glob("*.sh")} - {"tensorboard.sh", "ray-head.sh"}
    assert commands >= scripts, sorted(scripts - commands)
