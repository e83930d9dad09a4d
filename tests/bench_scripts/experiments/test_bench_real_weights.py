"""The real-weights bench's stopping rule (bench/experiments/real_weights.py): it decides, from the trainer's log, when
to stop so that no trained step is lost; a mistake there costs GPU time that cannot be had back."""

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path[:0] = [str(BENCH / "experiments"), str(BENCH)]  # the experiment, and the helpers it imports (lib/)

import real_weights  # noqa: E402


def options(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"kill_after": None, "budget_s": 400.0, "save_freq": 5, "teardown_s": 45.0, **kw})


def test_stops_after_a_checkpoint_when_the_next_would_not_fit():
    reason = real_weights.should_stop(10, 9, [25, 21, 24, 24, 74], 265.0, options())
    assert reason and "checkpoint of step 10" in reason


def test_stops_even_when_the_checkpoint_line_arrived_with_the_next_step():
    # the log showed step 9, then steps 10 and 11 together: the checkpoint of step 10 must not be missed
    reason = real_weights.should_stop(11, 9, [25, 21, 24, 24, 98], 290.0, options())
    assert reason and "checkpoint of step 10" in reason


def test_goes_on_between_checkpoints_and_when_time_is_left():
    assert real_weights.should_stop(9, 8, [25, 21, 24, 24], 300.0, options()) is None
    assert real_weights.should_stop(10, 9, [25, 21, 24, 24, 74], 100.0, options()) is None


def test_kill_after_wins():
    assert "killed after step 7" in real_weights.should_stop(7, 6, [25], 10.0, options(kill_after=7, budget_s=None))


def test_settings_read_back_from_the_recorded_command():
    command = "verl-p40 train trainer.save_freq=5 trainer.critic_warmup=8 x=1 trainer.save_freq=2"
    assert real_weights.command_setting(command, "trainer.critic_warmup") == 8
    assert real_weights.command_setting(command, "trainer.save_freq") == 2  # the later value wins, as in verl-p40
    assert real_weights.command_setting("verl-p40 train trainer.save_freq=5", "trainer.critic_warmup") == 0
    assert real_weights.command_setting("a.trainer.critic_warmup=3", "trainer.critic_warmup") == 0
    assert real_weights.command_setting(None, "trainer.save_freq", 5) == 5


def steps_with(scores: list[float]) -> list[dict]:
    return [{"step": 0, "val-core/openai/gsm8k/reward/mean@1": 0.3}] + [
        {"step": i + 1, "critic/score/mean": v} for i, v in enumerate(scores)
    ]


def test_reward_rise_splits_at_the_warmup_and_finds_a_clear_rise():
    # steps 1..3 are the base policy's rollouts (the first actor update comes in step 3, after its rollout)
    rise = real_weights.reward_rise(steps_with([0.10, 0.12, 0.11, 0.30, 0.32, 0.31, 0.33]), warmup=3)
    assert rise["base_policy_steps"] == [1, 3] and rise["trained_steps"] == [4, 7]
    assert rise["base_policy_mean"] == 0.11 and rise["trained_mean"] == 0.315 and rise["rise"] == 0.205
    # exact: the three lowest of seven step means are the base ones in 1 of C(7, 3) = 35 splits
    assert rise["p_value_one_sided"] == 1 / 35 and "exact" in rise["test"]


def test_reward_rise_is_not_significant_for_a_flat_curve():
    flat = [0.2, 0.1, 0.3, 0.2, 0.1, 0.3, 0.2, 0.1, 0.3, 0.2]
    assert real_weights.reward_rise(steps_with(flat), warmup=3)["p_value_one_sided"] > 0.3


def test_reward_rise_samples_when_splits_are_many_and_needs_both_sides():
    rising = [0.1] * 20 + [0.3] * 20
    rise = real_weights.reward_rise(steps_with(rising), warmup=20, draws=2000)
    assert "2000 random splits" in rise["test"] and rise["p_value_one_sided"] < 0.001
    assert real_weights.reward_rise(steps_with([0.1, 0.2, 0.3]), warmup=0) is None
    assert real_weights.reward_rise(steps_with([0.1, 0.2, 0.3]), warmup=2) is None


def test_repeat_eval_counts_what_moved_between_two_evaluations_of_one_model():
    def record(answer: str, flexible: float) -> dict:
        return {"models": {"base": {"answer": answer, "strict": 0.0, "flexible": flexible}}}

    first = [record("a", 1.0), record("b", 0.0), record("c", 1.0), record("d", 0.0)]
    second = [record("a", 1.0), record("b2", 1.0), record("c2", 1.0), record("d", 0.0)]
    same = real_weights.repeat_eval(first, second)
    assert same["questions"] == 4 and same["answers_differing"] == 2
    assert same["flexible"] == {"first": 0.5, "second": 0.75, "scores_differing": 1}
    assert same["strict"]["scores_differing"] == 0
