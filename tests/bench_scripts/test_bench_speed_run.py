"""The speed bench of the memory plan (bench/speed_run.py): each run's command gives the plan it ran with, so the
"before" run keeps the profile's old sizes and the "after" run takes the memory plan's."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import speed_run  # noqa: E402
from verl_p40.plan.planner import plan  # noqa: E402


def _config(name, tmp_path, tokenizer_dir):
    command = speed_run.train_command(name, tmp_path, 3)
    command[command.index("--model") + 1] = str(tokenizer_dir)  # the model's shape: config.json is enough
    options, facts = speed_run.options_of(command)
    return command, plan(options, facts).config()


def test_before_keeps_the_old_sizes_and_after_takes_the_memory_plans(tmp_path, tokenizer_dir):
    before_cmd, before = _config("p40-before", tmp_path, tokenizer_dir)
    _, after = _config("p40-after", tmp_path, tokenizer_dir)
    assert "--gpu-memory-cap-gb" in before_cmd and "kernels" in before_cmd  # the P40 path: 24 GB cap, masked
    assert before.actor_rollout_ref.rollout.micro_batch_size == 64
    assert before.actor_rollout_ref.model.enable_gradient_checkpointing is True
    assert after.actor_rollout_ref.rollout.micro_batch_size == 256
    assert after.actor_rollout_ref.model.enable_gradient_checkpointing is False


def test_the_plain_command_is_what_a_user_types(tmp_path):
    command = speed_run.train_command("h200-plain", tmp_path, 3)
    words = command[4:]
    assert words[:2] == ["--algorithm", "grpo-gsm8k"] and "--profile" not in words
    assert not [w for w in words if w.startswith("actor_rollout_ref")]  # no hand-set size
