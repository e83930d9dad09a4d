"""The planner's review (issue 74c) as a user meets it: a setting verl 0.5.0 would refuse in a Ray worker, or quietly
do something else with, ends `config` in one line naming the setting and the fix, exit code 2, no traceback, nothing
changed (bad_inputs/conftest.py's check_case)."""

from __future__ import annotations

import pytest

from bad_inputs.conftest import check_case

P40 = ["config", "--profile", "p40"]
CASES = [
    ("mini-batch-over-gpus",
     [*P40, "--card", "p40", "--gpus", "0,1", "--algorithm", "ppo", "actor_rollout_ref.actor.ppo_mini_batch_size=3"],
     "actor_rollout_ref.actor.ppo_mini_batch_size 3 x rollout.n 1 = 3 sequences do not divide over 2 GPUs"),
    ("update-tokens-ignored",
     [*P40, "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.p40_update_tokens=2048"],
     "actor_rollout_ref.actor.p40_update_tokens=2048 is ignored where actor_rollout_ref.actor.use_dynamic_bsz=true"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_setting_the_plan_would_not_honour_gets_one_line(world, name, args, expected):
    check_case(world, args, {}, expected)
