"""What a composed run is (critic, reference, GPUs, offloaded states, estimator) has one home, plan/workload.py: no
other module of app/ reads `use_kl_in_reward`, `use_kl_loss`, `n_gpus_per_node`, `adv_estimator`, any `*_offload`,
`trim_padding` or `use_remove_padding` (whether the passes trim and the update may regroup) from a config on its own.

What counts as a read, in each module's syntax tree (ast):
- an attribute of that name loaded (`cfg.algorithm.adv_estimator`, `fsdp_config.param_offload`);
- a string constant naming the key (the key itself, or a dotted path ending in it) as an argument of a call to a
  lookup: `get`, `_get`, `select`, `OmegaConf.select`, `getattr`, `pop` (`cfg.algorithm.get("use_kl_in_reward")`,
  `OmegaConf.select(cfg, "trainer.n_gpus_per_node")`);
- such a string as a subscript (`cfg["algorithm"]["adv_estimator"]`).
A writer is not a read: an `Override("...param_offload", ...)` or a dict of keys to values handed to the overrides
uses the key as a name to write. What this does not catch: a key put into a variable or a table first and looked up
through it (`key = "algorithm.adv_estimator"; get(key)`), or a config read by another spelling (`cfg.get(k)` over a
loop of all keys, as the rules' value checks do through workload's key names). patches/ is text written into verl's
own files, not code of ours that reads a config, and is left out.

bench/ is held to the same rule (its results are the project's evidence, and a benchmark that decides what a run is
on its own can disagree with the product it measures): every script and helper, bench/results/ left out (the
commands as they ran). `BENCH_COPIES` lists the one kind of read allowed there, with its reason: an experiment that
stands in for verl's worker copies the model's keys into the actor's config as verl's fsdp_workers does, so that the
patched actor decides from them as it does in a run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "app" / "verl_p40"
HOME = PACKAGE / "plan" / "workload.py"
BENCH = PACKAGE.parents[1] / "bench"
BENCH_COPIES = {  # bench file -> why it may read the keys itself
    "experiments/rollout_log_probs.py": "copies the model's trim_padding and use_remove_padding into the actor's "
    "config, as verl's fsdp_workers does before the patched actor decides from them",
}
NAMES = re.compile(
    r"^(use_kl_in_reward|use_kl_loss|n_gpus_per_node|adv_estimator|\w+_offload|trim_padding|use_remove_padding)$"
)
LOOKUPS = {"get", "_get", "select", "getattr", "pop"}


def _names_a_key(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and bool(NAMES.match(node.value.rsplit(".", 1)[-1]))
    )


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def reads(tree: ast.AST, is_name=NAMES.match, names_a_key=None) -> list[tuple[int, str]]:
    """(line, what) for every read of a workload key in `tree`, as the module docstring defines a read; `is_name` (a
    key's last name) and `names_a_key` (a lookup's argument) let another home's check (test_memory_plan_home.py) count
    its own keys the same way."""
    names_a_key = names_a_key or _names_a_key
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and is_name(node.attr):
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Call) and _callee(node) in LOOKUPS:
            found += [(a.lineno, f"{_callee(node)}({ast.unparse(a)})") for a in node.args if names_a_key(a)]
        elif isinstance(node, ast.Subscript) and names_a_key(node.slice):
            found.append((node.lineno, f"[{ast.unparse(node.slice)}]"))
    return found


def test_the_check_sees_each_kind_of_read():
    code = (
        "cfg.algorithm.adv_estimator\n"
        "OmegaConf.select(cfg, 'actor_rollout_ref.actor.fsdp_config.param_offload', default=False)\n"
        "cfg.actor_rollout_ref.actor.get('use_kl_loss')\n"
        "cfg['trainer']['n_gpus_per_node']\n"
        "Override('critic.model.fsdp_config.optimizer_offload', 'true', 'memory plan')\n"
        "out = {'trainer.n_gpus_per_node': 2}\n"
        "get('actor_rollout_ref.model.trim_padding', False)\n"
        "cfg.actor_rollout_ref.model.use_remove_padding\n"
    )
    assert [line for line, _ in reads(ast.parse(code))] == [1, 2, 3, 4, 7, 8]


def test_trims_and_regroups_are_decided_as_the_patch_decides_them():
    """trim_padding yields to use_remove_padding; only token-mean's loss without dynamic batches is regrouped, and only
    for the policy losses where that is exact."""
    import pytest

    from verl_p40.plan.workload import Workload

    trim = {"actor_rollout_ref": {"model": {"trim_padding": True}}}
    cases = [
        ({}, False, False),
        (trim, True, True),
        ({"actor_rollout_ref": {"model": {"trim_padding": True, "use_remove_padding": True}}}, False, False),
        (
            {"actor_rollout_ref": {**trim["actor_rollout_ref"], "actor": {"loss_agg_mode": "seq-mean-token-sum"}}},
            True,
            False,
        ),
        ({"actor_rollout_ref": {**trim["actor_rollout_ref"], "actor": {"use_dynamic_bsz": True}}}, True, False),
        ({"actor_rollout_ref": {**trim["actor_rollout_ref"], "actor": {"loss_agg_mode": "token-mean"}}}, True, True),
        # the patch's actor trims only without fused kernels (verl_050.py's actor-trim-setting): no regrouping then
        ({"actor_rollout_ref": {"model": {"trim_padding": True, "use_fused_kernels": True}}}, True, False),
    ]
    # the policy losses whose regrouped gradient is verl's (tests/update_probe.py): vanilla, gpg; not clip_cov, kl_cov
    for mode, regroups in (("vanilla", True), ("gpg", True), ("clip_cov", False), ("kl_cov", False)):
        actor = {"policy_loss": {"loss_mode": mode}}
        cases.append(({"actor_rollout_ref": {**trim["actor_rollout_ref"], "actor": actor}}, True, regroups))
    for config, trims, regroups in cases:
        run = Workload.of(config)
        assert (run.trims, run.regroups) == (trims, regroups), config
    with pytest.raises(AttributeError):
        Workload.of(trim).trims = False  # frozen


def test_the_workload_names_the_setting_that_keeps_verls_micro_batches():
    """One decision, read by the rules' refusal line: the first setting (in the patch's order) that turns the
    regrouped update off, or None where it regroups."""
    from verl_p40.plan.workload import Workload

    model, LOSS = {"trim_padding": True}, "actor_rollout_ref.actor.policy_loss.loss_mode"
    cases = [
        ({"model": model}, None),
        ({"model": {}}, "actor_rollout_ref.model.trim_padding"),
        ({"model": {**model, "use_remove_padding": True}}, "actor_rollout_ref.model.use_remove_padding"),
        ({"model": {**model, "use_fused_kernels": True}}, "actor_rollout_ref.model.use_fused_kernels"),
        ({"model": model, "actor": {"policy_loss": {"loss_mode": "kl_cov"}}}, LOSS),
        ({"model": model, "actor": {"loss_agg_mode": "seq-mean-token-sum"}}, "actor_rollout_ref.actor.loss_agg_mode"),
        ({"model": model, "actor": {"use_dynamic_bsz": True}}, "actor_rollout_ref.actor.use_dynamic_bsz"),
    ]
    for actor_rollout_ref, key in cases:
        run = Workload.of({"actor_rollout_ref": actor_rollout_ref})
        assert (run.keeps_micro_batches, run.regroups) == (key, key is None), actor_rollout_ref


def readers(home: Path, reader=reads) -> list[str]:
    """path:line: what, for every read (`reader`'s) in app/ outside `home` and patches/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == home or "patches" in path.relative_to(PACKAGE).parts:
            continue
        for line, what in reader(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    return found


def test_only_the_workload_reads_what_a_run_is():
    found = readers(HOME)
    assert not found, "read these from plan.workload.Workload.of(config) instead:\n" + "\n".join(found)


def _bench_files() -> list[Path]:
    return sorted(p for p in BENCH.rglob("*.py") if "results" not in p.relative_to(BENCH).parts)


def test_bench_reads_what_a_run_is_from_the_workload_too():
    found = []
    for path in _bench_files():
        if str(path.relative_to(BENCH)) in BENCH_COPIES:
            continue
        for line, what in reads(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(BENCH.parent)}:{line}: {what}")
    assert not found, "read these from plan.workload.Workload.of(config) instead:\n" + "\n".join(found)
    assert len(_bench_files()) > 30  # the check reads bench/


def test_each_bench_copy_is_still_a_reader():
    """An entry of BENCH_COPIES whose file no longer reads a key is taken out, so the list stays the exceptions."""
    stale = [name for name in BENCH_COPIES if not reads(ast.parse((BENCH / name).read_text()))]
    assert not stale, f"no longer read the keys themselves: {stale}"
