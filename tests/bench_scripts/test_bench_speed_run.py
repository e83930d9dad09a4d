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


def test_the_generate_run_is_the_plan_with_transformers_generate(tmp_path, tokenizer_dir):
    """p40-generate and p40-after differ only in the decoder (patches/p40_decode.py), the plan's default in after."""
    generate_cmd, generate = _config("p40-generate", tmp_path, tokenizer_dir)
    after_cmd, after = _config("p40-after", tmp_path, tokenizer_dir)
    assert generate.actor_rollout_ref.rollout.p40_decode == "off"
    assert after.actor_rollout_ref.rollout.p40_decode == "auto"
    assert [w for w in generate_cmd if "p40_decode" not in w] == [w.replace("after", "generate") for w in after_cmd]
    real = speed_run.train_command("p40-after", tmp_path, 3, Path("/real"))
    assert real[real.index("--model") + 1] == "/real"  # --model: the real weights instead of WORK/model


def test_generation_speed_against_the_p40s_limits(tokenizer_dir):
    """Tokens a second from the step's mean answer, the decoding step's time from its longest, beside the P40's
    GPU time for one decoding step (the projection's arithmetic and memory limits)."""
    from verl_p40.perf import projection

    shape = projection.Shape.of_folder(tokenizer_dir)
    steps = [{"timing_s/gen": g, "response_length/mean": 300.0, "response_length/max": 512.0} for g in (40, 20, 22)]
    run = projection.Run(256, 320, 512, 512.0, False, True, False, {})
    out = speed_run.generation(steps, 256, shape, run)
    assert out["seconds"] == 21.0 and out["tokens_per_s"] == round(300 * 256 / 21.0, 1)  # the warm-up step left out
    assert out["ms_per_decoding_step"] == round(1000 * 21.0 / 512, 2)
    _, p40 = projection.generation_gpu_seconds(shape, run, projection.P40)
    assert out["p40_gpu_ms_per_decoding_step"] == round(1000 * p40, 2) > 20  # 256 rows of 0.5B in fp32: ~26 ms


def test_resummarise_draws_the_committed_results_again(tmp_path, monkeypatch):
    """What a result derives from its trainer log (step times, projections, peaks) is drawn again the same from the
    committed logs, unmasked H200 runs included, on a machine whose GPU is not the H200 they ran on (here: none)."""
    import argparse
    import json
    import shutil

    from verl_p40.plan.facts import Facts

    monkeypatch.setattr(Facts, "here", classmethod(lambda cls: cls(gpus=None)))
    committed = REPO / "bench" / "results" / "plan-check-2026-12-03"
    for path in committed.glob("*"):
        if path.is_file():
            shutil.copy(path, tmp_path / path.name)
    speed_run.resummarise(argparse.Namespace(results=str(tmp_path)))
    names = sorted(p.name for p in committed.glob("*.json") if "command" in json.loads(p.read_text()))
    assert {"h200-plain.json", "h200-hand.json", "cap16.json", "p40-after.json"} <= set(names)
    for name in names:
        assert json.loads((tmp_path / name).read_text()) == json.loads((committed / name).read_text()), name
