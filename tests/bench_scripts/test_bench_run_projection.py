"""A recorded command read back (bench/lib/run_projection.py): by the product's parser and options, with the defaults
of the command's day where it names none, never with this process's environment."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from lib.run_projection import RECORDED_DEFAULTS, options_from, recorded_options  # noqa: E402


def test_a_recorded_command_is_read_as_the_cli_reads_it(monkeypatch):
    monkeypatch.setenv("VERL_P40_GPUS", "0,1,2,3")  # this shell's, not the run's
    monkeypatch.setenv("VERL_P40_ALGORITHM", "ppo-gsm8k")
    options = recorded_options(
        ["bench", "--profile", "p40", "--gpus", "0,1", "--set", "trainer.save_freq=-1", "data.train_batch_size=64"]
    )
    assert (options.profile, options.gpus, options.algorithm) == ("p40", (0, 1), "grpo-gsm8k")  # today's default
    assert options.sets == ["trainer.save_freq=-1", "data.train_batch_size=64"]
    assert os.environ["VERL_P40_GPUS"] == "0,1,2,3"  # put back


def test_the_day_s_defaults_stand_in_only_for_what_the_command_does_not_name():
    assert RECORDED_DEFAULTS["--algorithm"] == ("algorithm", "ppo")  # the default before 2026-12-02
    old = options_from("verl-p40 train --gpu-memory-cap-gb 24 trainer.total_training_steps=5")
    assert (old.algorithm, old.profile, old.gpus) == ("ppo", "p40", None)
    named = options_from("verl-p40 train --algorithm=grpo-gsm8k --profile ampere")
    assert (named.algorithm, named.profile) == ("grpo-gsm8k", "ampere")


def test_a_compacting_run_s_prefill_is_priced_at_its_longest_prompt_without_trim_padding():
    """The decoder's compaction cuts the prompt's unused padding whether or not the passes trim (model.trim_padding):
    its run's generation is priced at the step's longest prompt, not at data.max_prompt_length."""
    import json

    from lib.run_projection import SHARED, project_run
    from verl_p40.perf import projection

    shape = projection.Shape.from_config(json.loads((SHARED / "config.json").read_text()))
    steps = [
        {
            "prompt_length/max": 120.0,
            "response_length/max": 300.0,
            "response_length/mean": 200.0,
            "timing_s/gen": 20.0,
            "timing_s/step": 60.0,
        }
    ] * 3
    base = "verl-p40 train --profile p40 --algorithm grpo-gsm8k --set actor_rollout_ref.model.trim_padding=false"
    full = project_run("full", base + " actor_rollout_ref.rollout.p40_decode_compact=false", steps, shape, recent=True)
    compact = project_run("compact", base + " actor_rollout_ref.rollout.p40_decode_compact=true", steps, shape, True)
    assert compact["p40_projection"]["gen"] < full["p40_projection"]["gen"]
