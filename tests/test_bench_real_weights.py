"""The real-weights bench's stopping rule (bench/real_weights.py): it decides, from the trainer's log, when to stop
so that no trained step is lost; a mistake there costs GPU time that cannot be had back."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

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
