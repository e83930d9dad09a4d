"""The shipped-stack check (bench/experiments/stack_check.py, issue 45): what each stack runs, and the comparison of two
stacks' results, which needs no GPU."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench" / "experiments"))

import stack_check  # noqa: E402


def test_every_check_runs_the_p40_path(tmp_path):
    commands = stack_check.commands("/m", "/d", tmp_path)
    assert list(commands) == ["doctor", "ppo", "recipe", "eval"]
    for name, steps, algorithm in (("ppo", 2, "ppo"), ("recipe", 1, "grpo-gsm8k")):
        words = commands[name]
        assert words[:3] == ["train", "--algorithm", algorithm]
        assert ["--profile", "p40", "--gpu-memory-cap-gb", "24"] == words[3:7] and "kernels" in words
        assert f"trainer.total_training_steps={steps}" in words and str(tmp_path / name / "ckpt") in words
    assert commands["doctor"][:5] == ["doctor", "--profile", "p40", "--gpu-memory-cap-gb", "24"]
    assert commands["eval"][commands["eval"].index("--limit") + 1] == "64"
    assert commands["eval"][commands["eval"].index("--data") + 1] == "/d/test.parquet"


def _stack(name: str, torch: str, answers: list[str], half: int) -> dict:
    audit = {"half_precision_ops": half, "sdpa_ops": ["aten::_scaled_dot_product_efficient_attention float32"]}
    train = {
        "returncode": 0, "wall_s": 60.0, "step_s": [20.0, 18.0], "summary": {"peak_torch_max_allocated_gb": 15.1},
        "nvml_peak_process_used_gb": 20.2 if name == "image" else 20.4, "nvml_peak_device_used_gb": 20.9,
    }  # fmt: skip
    speed = 6.7 if name == "image" else 7.7
    report = {"models": {"base": {"accuracy_flexible": 0.25 if name == "image" else 0.2656, "samples_per_s": speed}}}
    return {
        "stack": name,
        "torch": {"torch": torch},
        "checks": {
            "doctor": {"returncode": 0, "wall_s": 5.0, "audit": audit},
            "ppo": {**train, "audit": audit},
            "recipe": {**train, "audit": audit},
            "eval": {"returncode": 0, "wall_s": 30.0, "answers": answers, "audit": audit, "report": report},
        },
    }


def test_compare_sets_two_stacks_side_by_side_and_shows_where_answers_part(tmp_path):
    same = "Natalia sold 48 clips in April and half as many in May: 48 + 24 = 72."
    (tmp_path / "stack-image.json").write_text(json.dumps(_stack("image", "2.6.0+cu124", [same, "It is 10.", "5"], 2)))
    (tmp_path / "stack-machine.json").write_text(json.dumps(_stack("machine", "2.11.0", [same, "It is 12.", "5"], 0)))
    script = REPO / "bench" / "experiments" / "stack_check.py"
    done = subprocess.run(
        [sys.executable, str(script), "compare", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "stack-check.json").read_text())
    assert result["stacks"] == ["image", "machine"]
    assert result["answers"]["identical"] == 2 and result["answers"]["differing_questions"] == [1]
    divergence = result["answers"]["first_divergence"]
    assert divergence["question"] == 1 and divergence["first"] == "0." and divergence["second"] == "2."
    assert ["ppo", "half-precision ops", 2, 0] in result["table"]
    assert ["recipe", "torch peak (GiB)", 15.1, 15.1] in result["table"]
    assert ["ppo", "NVML process peak (GB)", 20.2, 20.4] in result["table"]
    assert ["eval", "accuracy (flexible)", 0.25, 0.2656] in result["table"]  # each stack's own, in its column
    assert ["eval", "answers a second", 6.7, 7.7] in result["table"]
    assert result["answers"]["answers"] == {"image": 3, "machine": 3}
    text = (tmp_path / "stack-check.md").read_text()
    assert "image (torch 2.6.0+cu124)" in text
    assert "2 of 3 compared identical (image answered 3; machine answered 3 of 64: a failed or cut eval)." in text


def test_a_failed_eval_is_named_not_counted_as_agreement(tmp_path):
    answers = [f"It is {i}." for i in range(64)]
    (tmp_path / "stack-image.json").write_text(json.dumps(_stack("image", "2.6.0", [], 0)))
    (tmp_path / "stack-machine.json").write_text(json.dumps(_stack("machine", "2.11.0", answers, 0)))
    script = REPO / "bench" / "experiments" / "stack_check.py"
    done = subprocess.run([sys.executable, str(script), "compare", "--out", str(tmp_path)], capture_output=True)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "stack-check.md").read_text()
    assert text.endswith("0 of 0 compared identical (image answered 0 of 64: a failed or cut eval).\n")


def test_checks_run_in_the_order_asked_each_once_and_only_known_ones():
    errors = []
    assert stack_check.checks_asked("eval,doctor,recipe,ppo", errors.append) == ["eval", "doctor", "recipe", "ppo"]
    assert stack_check.checks_asked("eval", errors.append) == ["eval"] and not errors
    stack_check.checks_asked("eval,foo", errors.append)
    stack_check.checks_asked("eval,eval", errors.append)
    stack_check.checks_asked("", errors.append)
    assert errors == [
        "--checks: no check named foo (there are doctor, ppo, recipe, eval)",
        "--checks: each check once, at least one (asked: 'eval,eval')",
        "--checks: each check once, at least one (asked: '')",
    ]


def test_compare_says_what_is_missing(tmp_path):
    (tmp_path / "stack-image.json").write_text(json.dumps(_stack("image", "2.6.0", [], 0)))
    script = REPO / "bench" / "experiments" / "stack_check.py"
    done = subprocess.run(
        [sys.executable, str(script), "compare", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"stack_check compare: {tmp_path} holds 1 stack results (stack-NAME.json); run both stacks first"
    ]


def test_the_doctors_lines_are_read_from_its_log_past_what_else_it_holds():
    checks = [{"name": "gpu", "status": "PASS", "detail": "Tesla P40", "fix": ""}]
    log = "$ python -m verl_p40.cli doctor --json\n[pascal-mask] masked\n" + json.dumps(checks, indent=2) + "\n"
    assert stack_check.doctor_lines(log) == {"gpu": "PASS Tesla P40"}
    assert stack_check.doctor_lines("$ python -m verl_p40.cli doctor --json\nTraceback ...\n") is None
