"""The memory plan has one home, plan/memory_plan.py: no other module of app/ reads the keys it sizes (the generation
chunk, the update and log-prob micro-batches, the update's token budget, gradient checkpointing) from a config on its
own; the projection reads them through `memory_plan.setting`. And the plan reads its own overrides back in one place,
the planner's `_so_far`: no plan step previews the override strings of the steps before it (issue 70).

What counts as a read, in each module's syntax tree (as tests/test_workload_home.py has it, one kind more):
- an attribute of a key's last name loaded (`cfg.critic.ppo_micro_batch_size_per_gpu`);
- as an argument of a lookup (`get`, `_get`, `select`, `getattr`, `pop`): a string constant naming the key (the key
  itself, or a dotted path ending in its last name), or the memory plan's table spelled through
  (`get(MEMORY_KEYS["generation"][0])`, `select(cfg, KEYS["update_micro"][1])`);
- such a string as a subscript (`cfg["critic"]["ppo_micro_batch_size_per_gpu"]`).
A writer is not a read (an `Override(...)`, a tuple of keys the rules check by value). What this does not see: a key
put into a variable first and looked up through it, as the rules' divisibility check (`f"{role}.ppo_micro_..."`)
and their token-budget check do on the composed config, where every rule sees the whole config once. patches/ is text
written into verl's own files and is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_workload_home import _callee, readers
from test_workload_home import reads as workload_reads

PACKAGE = Path(__file__).resolve().parents[2] / "app" / "verl_p40"
HOME = PACKAGE / "plan" / "memory_plan.py"
KEYS = {
    "actor_rollout_ref.rollout.micro_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.p40_update_tokens",
    "critic.p40_update_tokens",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.model.enable_gradient_checkpointing",
}
LAST_NAMES = {key.rsplit(".", 1)[-1] for key in KEYS}
TABLES = {"KEYS", "MEMORY_KEYS"}  # the memory plan's table, by the names it has had


def _names_a_key(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.rsplit(".", 1)[-1] in LAST_NAMES
    )


def _through_the_table(node: ast.AST) -> bool:
    """`MEMORY_KEYS[...]...` or `memory_plan.KEYS[...]...`: a key taken from the memory plan's table."""
    while isinstance(node, ast.Subscript):
        node = node.value
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in TABLES


def reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every read of a memory key in `tree`, as the module docstring defines a read (the workload
    check's reader, with these keys and the table)."""
    return workload_reads(tree, LAST_NAMES.__contains__, lambda arg: _names_a_key(arg) or _through_the_table(arg))


def test_the_check_sees_each_kind_of_read():
    code = (
        "cfg.critic.ppo_micro_batch_size_per_gpu\n"
        "OmegaConf.select(cfg, 'actor_rollout_ref.model.enable_gradient_checkpointing', default=False)\n"
        "get(MEMORY_KEYS['generation'][0])\n"
        "cfg['critic']['p40_update_tokens']\n"
        "Override('critic.ppo_micro_batch_size_per_gpu', '4', 'memory plan')\n"
        "POSITIVE = ('critic.ppo_micro_batch_size_per_gpu',)\n"
        "OmegaConf.select(tree, memory_plan.KEYS['update_micro'][1])\n"
    )
    assert [line for line, _ in reads(ast.parse(code))] == [1, 2, 3, 4, 7]


def test_the_table_is_the_homes():
    from verl_p40.plan import memory_plan

    assert {key for keys in memory_plan.KEYS.values() for key in keys} == KEYS


def test_only_the_memory_plan_reads_its_keys():
    found = readers(HOME, reads)
    assert not found, "read these through plan.memory_plan (setting, or the plan itself):\n" + "\n".join(found)


def _callers(name: str) -> list[str]:
    """Where app/ calls `name` (`name(...)` or `module.name(...)`), as path:line."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _callee(node) == name:
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return out


def test_the_plan_reads_its_overrides_back_in_one_place():
    """No plan step previews the override strings of the steps before it: a later step takes what an earlier one
    decided as a value (the batch step's `Batch`), and what it reads of the settings so far (the user's included) the
    planner hands it, previewed in `_so_far` alone."""
    callers = _callers("preview")
    assert not [c for c in callers if c.startswith("verl_p40/plan/steps.py")], callers
    assert len(callers) == 1 and callers[0].startswith("verl_p40/plan/planner.py"), callers
