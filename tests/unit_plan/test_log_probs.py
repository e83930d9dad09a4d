"""Where the PPO ratio's old log-probs come from (plan/log_probs.py): the rollout's own where they are the pass's
(the HF rollout with verl-p40's decoder, fp32, the actor's weights), verl's old_log_prob pass elsewhere; a plan
decision `verl-p40 config` shows (a note and actor_rollout_ref.rollout.p40_log_probs) and the user can turn off."""

from __future__ import annotations

import pytest

from conftest import cli

KEY = "actor_rollout_ref.rollout.p40_log_probs"
HF = "actor_rollout_ref.rollout.name=hf"  # where vLLM is installed, the ampere profile's vLLM rollout would run
SKIPPED = (
    "old log-probs and actor/entropy: the rollout's own (fp32, the actor's weights, at its temperature): verl's "
    f"old_log_prob pass skipped (off: --set {KEY}=pass)"
)
AUTO = ("--set", f"{KEY}=auto")


def _chosen(stdout: str) -> str:
    """The value of p40_log_probs in the composed config `verl-p40 config` prints."""
    return next(
        line.split(":", 1)[1].strip() for line in stdout.splitlines() if line.strip().startswith("p40_log_probs:")
    )


@pytest.mark.parametrize(
    ("args", "source", "note"),
    [
        # grpo-gsm8k, the default: the rollout's, validated over 20 steps (bench/results/p40-path-compact-2026-12-06)
        (("--profile", "p40"), "rollout", SKIPPED),
        (("--profile", "p40", *AUTO), "rollout", SKIPPED),
        (("--profile", "p40", "--algorithm", "ppo-gsm8k", *AUTO), "rollout", SKIPPED),  # PPO with a critic
        (
            ("--profile", "p40", "--lora-rank", "8"),
            "pass",
            "old log-probs: verl's old_log_prob pass (a LoRA actor decodes with generate(), which returns no "
            "log-probs)",
        ),
        (
            ("--profile", "volta-turing"),
            "pass",
            "old log-probs: verl's old_log_prob pass (the rollout samples in float16, the pass the update compares "
            "with runs in its own precision)",
        ),
        (
            ("--card", "h200", "--profile", "ampere", "--set", HF),  # the HF rollout in fp32, TF32 on
            "pass",
            "old log-probs: verl's old_log_prob pass (TF32 matmuls (--tf32): the rollout and the pass round at TF32's "
            "precision, each in its own order)",
        ),
        (("--card", "h200", "--profile", "ampere", "--tf32", "off", "--set", HF, *AUTO), "rollout", SKIPPED),
        (
            ("--profile", "p40", "--set", f"{KEY}=pass"),
            "pass",
            f"old log-probs: verl's old_log_prob pass ({KEY}=pass, your setting)",
        ),
    ],
    ids=[
        "grpo-default",
        "grpo-auto",
        "ppo-critic-auto",
        "lora",
        "half-precision",
        "tf32",
        "fp32-h200-auto",
        "turned-off",
    ],
)
def test_the_plan_says_where_the_old_log_probs_come_from(args, source, note):
    result = cli("config", *args)
    assert result.returncode == 0, result.stderr
    assert f"[verl-p40] {note}\n" in result.stderr
    assert _chosen(result.stdout) == source


def test_the_rollouts_where_they_are_not_exact_is_refused_in_one_line():
    result = cli(
        "config", "--profile", "p40", "--set", "actor_rollout_ref.rollout.p40_decode=off", "--set", f"{KEY}=rollout"
    )
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"verl-p40 config: error: --set {KEY}=rollout: p40_decode=off: transformers' generate() decodes and returns "
        f"no log-probs; use {KEY}=auto or pass"
    ]
    assert "Traceback" not in result.stderr


def test_a_value_that_is_no_choice_is_refused_in_one_line():
    """`off` (or any other word) once became the rollout's log-probs: the plan's step, which resolves the user's value
    after their settings, took anything but pass and rollout for auto."""
    result = cli("config", "--profile", "p40", "--set", f"{KEY}=off")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"verl-p40 config: error: --set {KEY}=off: not one of auto, rollout, pass"
    ]
