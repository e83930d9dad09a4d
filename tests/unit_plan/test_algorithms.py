"""Algorithms and LoRA as data (config/algorithms/, config/lora.yaml), composed over the profile by `verl-p40`."""

import json
import shlex

import pytest

from conftest import cli
from verl_p40 import UserError
from verl_p40.models.checkpoints import write_run_record
from verl_p40.plan import algorithms
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions


def _words(result):
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout.replace("\\\n", " "))


def test_every_algorithm_file_composes_against_verl_and_names_a_verl_estimator():
    assert algorithms.available() == ["grpo", "grpo-gsm8k", "ppo", "ppo-gsm8k", "reinforce_plus_plus", "rloo"]
    for name in algorithms.available():
        run = plan(RunOptions(profile="p40", algorithm=name))
        cfg = run.config()
        algo = algorithms.load(name)
        assert cfg.algorithm.adv_estimator == algo.estimator
        assert cfg.actor_rollout_ref.rollout.n == algo.samples_per_prompt
        # the profile's sequences per step are kept (64 on the p40 profile) unless the file sets its own prompts
        own = algo.verl.get("data", {}).get("train_batch_size")
        assert cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n == (
            own * algo.samples_per_prompt if own else 64
        )
        own = algo.verl.get("actor_rollout_ref", {}).get("actor", {}).get("ppo_mini_batch_size")
        assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == (own or 16 // algo.samples_per_prompt)
        # micro-batches are sequences, sized by the memory plan for the card (a P40 here): they divide a mini-batch
        micro = cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
        assert (cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n) % micro == 0
        assert cfg.trainer.experiment_name == f"qwen2.5-0.5b-gsm8k-{name}"


def test_grpo_has_no_kl_in_the_reward_and_kl_as_a_loss(tiny_model, prepared):
    words = _words(
        cli(
            "train",
            "--profile",
            "p40",
            "--dry-run",
            "--algorithm",
            "grpo",
            "--model",
            str(tiny_model),
            "--data",
            str(prepared),
        )
    )
    for expected in (
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.rollout.n=4",
        "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    ):
        assert expected in words, expected


def test_samples_per_prompt_rescales_and_a_users_batch_still_wins(tiny_model, prepared):
    words = _words(
        cli(
            "train",
            "--profile",
            "p40",
            "--dry-run",
            "--algorithm",
            "grpo",
            "--samples-per-prompt",
            "8",
            "--model",
            str(tiny_model),
            "--data",
            str(prepared),
            "data.train_batch_size=4",
        )
    )
    assert "actor_rollout_ref.rollout.n=8" in words and "actor_rollout_ref.actor.ppo_mini_batch_size=2" in words
    assert [w for w in words if w.startswith("data.train_batch_size=")] == ["data.train_batch_size=4"]


def test_lora_settings_and_their_origin_in_errors(tiny_model, prepared):
    words = _words(
        cli(
            "train",
            "--profile",
            "p40",
            "--dry-run",
            "--algorithm",
            "grpo",
            "--lora-rank",
            "32",
            "--lora-alpha",
            "16",
            "--model",
            str(tiny_model),
            "--data",
            str(prepared),
        )
    )
    for expected in (
        "actor_rollout_ref.model.lora_rank=32",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=all-linear",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-05",
        f"trainer.experiment_name={tiny_model.name.lower()}-gsm8k-grpo-lora32",
    ):
        assert expected in words, expected
    assert not any(
        w.startswith("actor_rollout_ref.model.lora_rank=")
        for w in _words(
            cli("train", "--profile", "p40", "--dry-run", "--model", str(tiny_model), "--data", str(prepared))
        )
    )


def test_an_alpha_without_a_rank_is_said_to_do_nothing(tmp_path):
    """LORA_ALPHA left in .env after LORA_RANK went back to 0 trains every weight: the console says so."""
    run = plan(RunOptions(profile="p40", lora_alpha=16, checkpoints=str(tmp_path)))
    assert "--lora-alpha 16 (or $VERL_P40_LORA_ALPHA) has no effect without --lora-rank" in run.notes
    assert not any("lora_rank=" in o for o in run.overrides)
    assert not any("has no effect" in n for n in plan(RunOptions(profile="p40", checkpoints=str(tmp_path))).notes)


def test_the_run_record_refuses_to_resume_other_settings(tmp_path):
    first = plan(RunOptions(profile="p40", algorithm="grpo", checkpoints=str(tmp_path)))
    path = write_run_record(first.record)
    record = json.loads(path.read_text())
    assert path.parent.name == "qwen2.5-0.5b-gsm8k-grpo"
    assert record["algorithm"] == "grpo" and record["samples_per_prompt"] == 4 and record["lora"] is None
    # the same experiment folder, asked for PPO: refused before anything starts, the record untouched
    other = plan(
        RunOptions(
            profile="p40",
            algorithm="ppo",
            checkpoints=str(tmp_path),
            sets=["trainer.experiment_name=qwen2.5-0.5b-gsm8k-grpo"],
        )
    )
    before = path.read_bytes()
    with pytest.raises(UserError, match="made with algorithm 'grpo', this run has 'ppo'"):
        write_run_record(other.record)
    assert path.read_bytes() == before
    write_run_record(first.record)  # the same settings resume


def test_batch_per_prompt_names_the_divisors():
    with pytest.raises(UserError, match="use one of 1, 2, 4, 8, 16,"):
        algorithms.batch_per_prompt(
            {"data": {"train_batch_size": 64}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16}}}, 5, "--x"
        )
    assert algorithms.batch_per_prompt({"data": {"train_batch_size": 64}}, 1, "--x") == {}


def test_the_gsm8k_recipe_sets_its_reward_and_the_options_still_win():
    recipe = plan(RunOptions(profile="p40", algorithm="grpo-gsm8k")).config()
    assert dict(recipe.custom_reward_function.reward_kwargs) == {"method": "flexible", "format_bonus": 0.0}
    assert recipe.actor_rollout_ref.actor.optim.lr == 2e-6
    assert recipe.actor_rollout_ref.actor.kl_loss_coef == 0.01
    assert recipe.data.max_response_length == 512
    # the recipe's own batch, in prompts: 32 prompts x 8 answers a step, 2 updates of 16 prompts; micro-batches are
    # the memory plan's (tests/unit_plan/test_memory.py), and divide an update's 128 answers
    assert recipe.data.train_batch_size == 32 and recipe.actor_rollout_ref.rollout.n == 8
    assert recipe.actor_rollout_ref.actor.ppo_mini_batch_size == 16
    assert 128 % recipe.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 0
    chosen = plan(RunOptions(profile="p40", algorithm="grpo-gsm8k", reward_method="strict", format_bonus=0.0)).config()
    assert dict(chosen.custom_reward_function.reward_kwargs) == {"method": "strict", "format_bonus": 0.0}
    # an algorithm file without a reward keeps verl's own GSM8K rule
    plain = plan(RunOptions(profile="p40", algorithm="grpo")).config()
    assert dict(plain.custom_reward_function.reward_kwargs) == {"method": "strict", "format_bonus": 0.0}


def test_a_recipe_batch_is_in_prompts_and_scales_with_samples_and_gpus():
    """with_batch puts the recipe's prompts in the profile's place as sequences, so --samples-per-prompt keeps the
    recipe's prompts (and the layout multiplies them by the GPUs as it does a profile's batch)."""
    recipe = algorithms.load("grpo-gsm8k")
    settings, rest = algorithms.with_batch(
        {
            "data": {"train_batch_size": 64, "max_prompt_length": 320},
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 16}},
        },
        recipe,
        8,
    )
    assert settings["data"] == {"train_batch_size": 256, "max_prompt_length": 320}
    assert settings["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 128
    assert (
        "train_batch_size" not in rest.verl["data"]
        and "ppo_mini_batch_size" not in rest.verl["actor_rollout_ref"]["actor"]
    )
    assert rest.verl["data"]["max_response_length"] == 512  # the rest of the recipe stays
    four = plan(RunOptions(profile="p40", algorithm="grpo-gsm8k", samples_per_prompt=4)).config()
    assert four.data.train_batch_size == 32 and four.actor_rollout_ref.rollout.n == 4
    # a recipe without a batch leaves the profile's sequences per step (divided by its n) as before
    plain = algorithms.load("grpo")
    assert algorithms.with_batch({"data": {"train_batch_size": 64}}, plain, 4) == (
        {"data": {"train_batch_size": 64}},
        plain,
    )


def test_a_recipe_batch_that_is_not_a_count_is_refused(tmp_path, monkeypatch):
    bad = algorithms.Algorithm(
        name="bad", path=tmp_path / "bad.yaml", description="", verl={"data": {"train_batch_size": "many"}}
    )
    with pytest.raises(UserError, match=r"bad.yaml: data.train_batch_size must be a whole number of prompts"):
        algorithms.with_batch({"data": {"train_batch_size": 64}}, bad, 8)


def test_a_reward_method_nobody_knows_is_refused_whatever_set_it():
    with pytest.raises(UserError, match="reward method 'nearest'"):
        plan(RunOptions(profile="p40", sets=["custom_reward_function.reward_kwargs.method=nearest"]))


def test_a_validation_slice_is_validated_on_every_ten_steps_unless_told_otherwise(tiny_model, gsm8k_dir, tmp_path):
    """With prep --val-size's val.parquet the run validates on it as it goes (the learning issue's honest signal);
    trainer.test_freq given by the user wins; without a slice verl's setting (the profile's) stays."""
    result = cli("prep", "--source", str(gsm8k_dir), "--out", str(tmp_path / "d"), "--limit", "40", "--val-size", "8")
    assert result.returncode == 0, result.stderr
    run = plan(RunOptions(profile="p40", model=str(tiny_model), data=str(tmp_path / "d")))
    assert run.config().trainer.test_freq == 10 and run.validation_questions == 8
    told = plan(
        RunOptions(profile="p40", model=str(tiny_model), data=str(tmp_path / "d"), sets=["trainer.test_freq=3"])
    )
    assert told.config().trainer.test_freq == 3
    plain = plan(RunOptions(profile="p40", model=str(tiny_model), data=str(tmp_path / "none")))
    assert plain.config().trainer.test_freq == -1 and plain.validation_questions is None


def test_the_default_run_is_the_gsm8k_recipe_for_its_measured_length_validated_and_saved_together(
    tiny_model, gsm8k_dir, tmp_path
):
    """No --algorithm and no length: grpo-gsm8k for 60 steps (the length whose held-out curve was measured), and with
    compose's val.parquet validated before the first step and every 10, saved at each validation (the best validated
    step is then on disk for retention to keep); the seed's PPO stays one option away, an epoch long."""
    result = cli("prep", "--source", str(gsm8k_dir), "--out", str(tmp_path / "d"), "--limit", "80", "--val-size", "8")
    assert result.returncode == 0, result.stderr
    cfg = plan(RunOptions(profile="p40", model=str(tiny_model), data=str(tmp_path / "d"))).config()
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.custom_reward_function.reward_kwargs.method == "flexible"
    assert cfg.trainer.total_training_steps == 60
    assert (cfg.trainer.test_freq, cfg.trainer.save_freq, cfg.trainer.val_before_train) == (10, 10, True)
    assert 60 % cfg.trainer.save_freq == 0  # the last step is a validated, saved one
    seed = plan(RunOptions(algorithm="ppo", profile="p40", model=str(tiny_model), data=str(tmp_path / "d"))).config()
    assert seed.algorithm.adv_estimator == "gae" and seed.trainer.total_training_steps is None
    assert seed.trainer.total_epochs == 1
