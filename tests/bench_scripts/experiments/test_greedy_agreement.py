"""The greedy-answer agreement check (bench/experiments/greedy_agreement.py): the two runs differ only in the
generation chunk, and the comparison counts identical answers and shows where the first different one departs."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench" / "experiments"))

import greedy_agreement  # noqa: E402


def test_the_two_commands_differ_only_in_the_chunk(tmp_path):
    before = greedy_agreement.command("chunk64", "/m", tmp_path)
    after = greedy_agreement.command("plan", "/m", tmp_path)
    assert "actor_rollout_ref.rollout.micro_batch_size=64" in before
    assert not any("micro_batch_size" in word for word in after)
    strip = lambda words: [w.replace("chunk64", "X").replace("plan", "X") for w in words if "micro_batch" not in w]  # noqa: E731
    assert strip(before) == strip(after)
    assert "trainer.val_only=true" in after and "--gpu-memory-cap-gb" in after


def _rows(outputs):
    return [{"input": f"q{i}", "output": o, "score": float(o.endswith("4"))} for i, o in enumerate(outputs)]


def test_compare_counts_identical_answers_and_shows_the_first_divergence():
    before = _rows(["2+2 is 4", "so 3", "the answer is 4", "x"])
    after = _rows(["2+2 is 4", "so 3", "the answer is 5 and 4", "y"])
    result = greedy_agreement.compare(before, after, count=3)
    assert result["compared"] == 3 and result["identical"] == 2
    assert result["differing_rows"] == [2]
    first = result["first_divergence"]
    assert first["row"] == 2 and first["chars_in_common"] == len("the answer is ")
    assert first["before_continues"] == "4" and first["after_continues"] == "5 and 4"
    assert result["score_before"] == 2 and result["score_after"] == 2  # the row's reward held, its text did not


def test_compare_refuses_runs_of_different_questions():
    before, after = _rows(["a"]), _rows(["a"])
    after[0]["input"] = "other"
    with pytest.raises(SystemExit, match="different questions"):
        greedy_agreement.compare(before, after)
