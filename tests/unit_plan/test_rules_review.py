"""The planner's review (issue 74c): mixed GPUs sized by the smallest card's memory, and the settings verl 0.5.0 would
refuse, or would quietly do something else with, refused before anything starts in one line naming the setting and
the fix."""

from __future__ import annotations

import pytest

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan import layout, memory
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions

P40 = GPUInfo(0, "Tesla P40", (6, 1), 23.9)
V100 = GPUInfo(1, "Tesla V100-PCIE-16GB", (7, 0), 15.8)


def test_mixed_gpus_are_sized_for_the_smallest_memory_not_the_oldest_card():
    """A P40 (sm_61, 24 GiB) beside a V100-16GB (sm_70, 16 GiB): the profile is the P40's (the older card's features),
    the memory plan the V100's 15.8 GiB, or the V100 runs out of memory."""
    assert layout.weakest([P40, V100]) == P40
    run = plan(RunOptions(profile="auto", algorithm="grpo-gsm8k"), Facts(gpus=(P40, V100)))
    assert run.profile.name == "p40"
    assert run.record["memory"]["allocator_gb"] == round(memory.usable_bytes(15.8, None) / 1e9, 2)
    assert layout.smallest([P40, V100]) == V100


def test_the_profiles_memory_warning_reads_the_smallest_card_too():
    """profiles.select's "sized for N GB and this GPU has M GiB" warning and its mixed-GPU note name the card the
    memory plan sizes for (the V100's 15.8 GiB), not only the oldest card (the P40's 23.9 GiB, which fits)."""
    from verl_p40.plan import profiles

    profile, notes = profiles.select([P40, V100])
    assert profile.fits(P40)
    warning = [n for n in notes if n.startswith("warning:")]
    assert len(warning) == 1 and "15.8 GiB" in warning[0] and "GPU 1" in warning[0], notes
    assert any("memory for the smallest, GPU 1 (15.8 GiB)" in n for n in notes), notes
    _, alone = profiles.select([P40])
    assert not [n for n in alone if n.startswith("warning:")], alone


def _plan(*sets: str, card: str = "p40", count: int = 1, **options):
    options.setdefault("profile", "p40")
    return plan(RunOptions(sets=list(sets), **options), Facts.of_card(card, count))


def _refused(*sets: str, **kwargs) -> str:
    with pytest.raises(UserError) as refused:
        _plan(*sets, **kwargs)
    line = str(refused.value)
    assert "\n" not in line
    return line


def test_an_entropy_bonus_plans_with_a_warning_that_the_memory_plan_does_not_price_it():
    """entropy_coeff != 0: verl 0.5.0's update computes the entropy with its gradient (dp_actor.py: calculate_entropy,
    a full-vocabulary softmax kept for the backward), which the memory model does not price: the plan says so beside
    its memory line and names what to lower (a legitimate verl setting: not refused)."""
    run = _plan("actor_rollout_ref.actor.entropy_coeff=0.001")
    warning = [n for n in run.notes if "entropy_coeff" in n]
    assert len(warning) == 1 and warning[0].startswith("warning: actor_rollout_ref.actor.entropy_coeff=0.001: ")
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in warning[0]
    assert not [n for n in _plan("actor_rollout_ref.actor.entropy_coeff=0").notes if "entropy_coeff" in n]


@pytest.mark.parametrize(
    "sets,key",
    [
        (["actor_rollout_ref.actor.ppo_mini_batch_size=3"], "actor_rollout_ref.actor.ppo_mini_batch_size"),
        (  # verl's dynamic batches normalise the mini-batch the same way
            ["actor_rollout_ref.actor.ppo_mini_batch_size=3", "actor_rollout_ref.actor.use_dynamic_bsz=true"],
            "actor_rollout_ref.actor.ppo_mini_batch_size",
        ),
        (["critic.ppo_mini_batch_size=5", "critic.ppo_micro_batch_size_per_gpu=1"], "critic.ppo_mini_batch_size"),
    ],
)
def test_a_mini_batch_that_does_not_divide_over_the_gpus_is_refused(sets, key):
    """verl 0.5.0's workers (fsdp_workers.py) normalise a mini-batch per GPU as ppo_mini_batch_size * rollout.n //
    world: 3 prompts over 2 GPUs would silently be mini-batches of 2."""
    line = _refused(*sets, count=2, algorithm="ppo")
    mini = int(sets[0].split("=")[1])
    assert line.startswith(f"--set {sets[0]}")
    assert f"{key} {mini} x rollout.n 1 = {mini} sequences do not divide over 2 GPUs" in line
    assert f"{mini} // 2 = {mini // 2} a GPU, {mini // 2 * 2} a mini-batch, not {mini}" in line
    assert f"set {key} to a multiple of 2 (e.g. {mini - 1})" in line
    # GRPO: 3 prompts x 4 answers = 12 sequences, 6 a GPU
    _plan("actor_rollout_ref.actor.ppo_mini_batch_size=3", count=2, algorithm="grpo")


TOKENS = "actor_rollout_ref.actor.p40_update_tokens"


@pytest.mark.parametrize(
    "setting,fix",
    [
        ("actor_rollout_ref.actor.use_dynamic_bsz=true", "set actor_rollout_ref.actor.use_dynamic_bsz=false"),
        (
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
            "set actor_rollout_ref.actor.loss_agg_mode=token-mean",
        ),
        ("actor_rollout_ref.model.use_remove_padding=true", "set actor_rollout_ref.model.use_remove_padding=false"),
        ("actor_rollout_ref.model.trim_padding=false", "set actor_rollout_ref.model.trim_padding=true"),
        ("actor_rollout_ref.model.use_fused_kernels=true", "set actor_rollout_ref.model.use_fused_kernels=false"),
    ],
)
def test_a_token_budget_the_run_set_where_the_update_is_not_regrouped_is_refused(setting, fix):
    """The patch (verl_050.py) regroups the update only with trimming on (and use_remove_padding off), token-mean and
    verl's own micro-batches; elsewhere it silently keeps verl's, so a budget the run set would do nothing it says."""
    line = _refused(setting, f"{TOKENS}=2048")
    assert line.startswith(f"--set {TOKENS}=2048, --set {setting}: ")
    assert f"{TOKENS}=2048 is ignored where {setting}" in line
    assert line.endswith(f"{fix}, or leave {TOKENS} unset")
    _plan(setting)  # the plan's own budget (0, verl's micro-batches): nothing to say


def test_a_token_budget_the_plan_set_is_not_refused():
    """Only a budget the run set (`--set`) is refused: one from the plan is the plan's to keep or drop."""
    from omegaconf import OmegaConf

    from verl_p40.plan import rules
    from verl_p40.plan.verlconfig import base_config

    cfg = OmegaConf.create(OmegaConf.to_container(_plan().config()))
    OmegaConf.update(cfg, TOKENS, 2048)
    OmegaConf.update(cfg, "actor_rollout_ref.actor.use_dynamic_bsz", True)
    rules.check(cfg, base_config(), {TOKENS: "memory plan (24.7 GB for the allocator)"})
    with pytest.raises(UserError, match="is ignored where actor_rollout_ref.actor.use_dynamic_bsz=true"):
        rules.check(cfg, base_config(), {TOKENS: f"--set {TOKENS}=2048"})
    # a profile of the user's own is the user's setting too (docs/configuration.md: "a token budget you set")
    with pytest.raises(UserError, match="is ignored where actor_rollout_ref.actor.use_dynamic_bsz=true"):
        rules.check(cfg, base_config(), {TOKENS: "/home/me/profiles/mine.yaml"})
    # a setting the config does not hold is said as unset, not None
    OmegaConf.update(cfg, "actor_rollout_ref.actor.use_dynamic_bsz", False)
    del cfg.actor_rollout_ref.model["trim_padding"]
    with pytest.raises(UserError, match="is ignored where actor_rollout_ref.model.trim_padding=unset"):
        rules.check(cfg, base_config(), {TOKENS: f"--set {TOKENS}=2048"})


def test_the_mini_batch_divides_over_the_data_parallel_ranks_not_the_gpus():
    """verl divides ppo_mini_batch_size x n by GPUs // ulysses_sequence_parallel_size: with 4 GPUs in pairs, 2 ranks."""
    from omegaconf import OmegaConf

    from verl_p40.plan import rules
    from verl_p40.plan.verlconfig import base_config

    cfg = OmegaConf.create(OmegaConf.to_container(_plan(count=4).config()))
    OmegaConf.update(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", 3)
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.n", 2)
    OmegaConf.update(cfg, "critic.ppo_mini_batch_size", 3)
    OmegaConf.update(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1)
    with pytest.raises(UserError, match="do not divide over 4 GPUs"):
        rules.check(cfg, base_config(), {})
    OmegaConf.update(cfg, "actor_rollout_ref.actor.ulysses_sequence_parallel_size", 2)
    rules.check(cfg, base_config(), {})
