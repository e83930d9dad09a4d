"""plan() as ordered steps over an input of GPU facts: a plan for a card this machine does not have needs no
monkeypatch, and the memory cap is one option with one rule, which `config` and `doctor` take too."""

import pytest

from conftest import cli
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan import steps
from verl_p40.plan.facts import CARDS, Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions


@pytest.mark.parametrize(
    "card,profile,precision",
    [("p40", "p40", "fp32"), ("v100", "volta-turing", "fp32"), ("a100-40gb", "ampere", "fp32")],
)
def test_a_plan_for_a_p40_a_v100_and_an_a100_from_gpu_facts_alone(card, profile, precision):
    run = plan(RunOptions(profile="auto", model="/m", data="/d"), Facts.of_card(card))
    cfg = run.config()
    assert run.profile.name == profile
    assert any(f"auto profile: {profile} for GPU 0: {CARDS[card][0]}" in n for n in run.notes)
    assert cfg.actor_rollout_ref.actor.fsdp_config.model_dtype == precision
    assert cfg.actor_rollout_ref.rollout.name == "hf"  # no vLLM on the card's facts (the default image)
    tf32 = run.env.get("VERL_P40_WORKER_TF32") == "1"
    assert tf32 is (card == "a100-40gb")  # TF32 on sm_80+ only: never on a P40 or a V100


def test_the_facts_are_the_plans_only_view_of_the_machine():
    """Two GPUs given as facts make a two-GPU plan here, where NVML sees none."""
    p40 = CARDS["p40"]
    two = Facts(gpus=tuple(GPUInfo(i, p40[0], p40[1], p40[2]) for i in range(2)))
    cfg = plan(RunOptions(profile="p40", model="/m", data="/d"), two).config()
    assert cfg.trainer.n_gpus_per_node == 2
    none = plan(RunOptions(profile="p40", model="/m", data="/d"), Facts(gpus=None)).config()
    assert none.trainer.n_gpus_per_node == 1


def test_each_step_takes_what_it_needs_and_returns_what_it_decides():
    """No draft passes between the steps: each returns a frozen result; the batch is decided by one step (the
    recipe's prompts x n, over the GPUs, in prompts), and the recipe's settings by their own, not the reward's."""
    import dataclasses

    from verl_p40.plan import layout

    options = RunOptions(profile="p40", model="/m", data="/d", algorithm="grpo-gsm8k")
    hw = steps.hardware(options, Facts(gpus=None), {})
    chosen = steps.recipe(options)
    batch = steps.batch(options, hw, chosen)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.sm = 8.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.part.notes = []
    batch_keys = {o.key: int(o.value) for o in batch.part.overrides}
    assert batch_keys["data.train_batch_size"] == 32 and batch_keys["actor_rollout_ref.actor.ppo_mini_batch_size"] == 16
    assert (batch.prompts, batch.mini_batch) == (32, 16)  # the typed value later steps take
    assert not {o.key for o in steps.profile_settings(hw.profile).overrides} & set(layout.BATCH_KEYS)
    assert "algorithm.adv_estimator" in {o.key for o in steps.recipe_settings(chosen).overrides}
    assert not {o.key for o in steps.reward_settings().overrides} & {"algorithm.adv_estimator", "data.train_batch_size"}


def test_config_takes_a_card_and_the_cap_that_compose_sets():
    result = cli("config", "--profile", "auto", "--card", "p40", "--gpu-memory-cap-gb", "24", "--overrides-only")
    assert result.returncode == 0, result.stderr
    assert "[verl-p40] auto profile: p40 for GPU 0: Tesla P40, sm_61, 23.9 GiB" in result.stderr
    assert "[verl-p40] GPU memory capped at 24 GB per process" in result.stderr
    assert "actor_rollout_ref.model.external_lib=verl_p40.worker_hooks" in result.stdout


def test_config_refuses_an_unknown_card_in_one_line():
    result = cli("config", "--card", "p4000", "--overrides-only")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--card" in result.stderr and "p40" in result.stderr


def test_doctor_takes_the_cap_and_the_option_checks_it_once():
    ok = cli("doctor", "--only", "verl", "--gpu-memory-cap-gb", "24")
    assert "unrecognized arguments" not in ok.stderr and "Traceback" not in ok.stderr
    low = cli("config", "--profile", "p40", "--gpu-memory-cap-gb", "0.3")
    assert low.returncode == 2 and "--gpu-memory-cap-gb: '0.3' is not a number from 0.5" in low.stderr
