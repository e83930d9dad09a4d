"""The error names where the value came from (issue 57): a value checked where it is used, not where it enters (prep's
validation slice against the rows the train split has), names the environment
variable when it came from one, as the option tier's own checks do; given as a flag, the flag."""

from __future__ import annotations

import pytest

from bad_inputs.conftest import T, check_case

PREP = ["prep", "--source", f"{T}/src", "--out", f"{T}/new"]
CASES = [
    ("val-size-env", PREP, {"VERL_P40_VAL_SIZE": "500"},
     "$VERL_P40_VAL_SIZE 500: the train split has only 8 rows; take fewer (--val-size 0: no validation slice; the "
     "trainer then does not validate) (the environment's value for --val-size)"),
    ("val-size-flag", [*PREP, "--val-size", "500"], {}, "error: --val-size 500: the train split has only 8 rows"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "env", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_late_check_names_the_variable_the_value_came_from(world, name, args, env, expected):
    check_case(world, args, env, expected)
