"""The greedy-answer agreement check (bench/experiments/greedy_agreement.py): the two runs of a pair differ only in
what the pair compares (the generation chunk, or the decoder), and the comparison counts identical answers and shows
where the first different one departs."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench" / "experiments"))

import greedy_agreement  # noqa: E402


@pytest.mark.parametrize("pair, differ", [("chunk", "micro_batch_size"), ("decode", "p40_decode")])
def test_the_two_commands_of_a_pair_differ_only_in_what_it_compares(tmp_path, pair, differ):
    before = greedy_agreement.command(pair, 0, "/m", tmp_path)
    after = greedy_agreement.command(pair, 1, "/m", tmp_path)
    assert any(differ in word for word in before) and not any(differ in word for word in after)
    names = [name for name, _ in greedy_agreement.PAIRS[pair]]
    strip = lambda words: [w.replace(names[0], "X").replace(names[1], "X") for w in words if differ not in w]  # noqa: E731
    assert strip(before) == strip(after)
    assert "trainer.val_only=true" in after and "--gpu-memory-cap-gb" in after


def test_both_runs_of_the_chunk_pair_decode_with_generate_as_that_check_did(tmp_path):
    """agreement-2026-12-02 compared chunks when generate() was the only decoder: its pair keeps it so."""
    for which in (0, 1):
        assert "actor_rollout_ref.rollout.p40_decode=off" in greedy_agreement.command("chunk", which, "/m", tmp_path)


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


def test_the_pairs_data_is_the_prepared_splits_read_with_pyarrow(prepared, tmp_path):
    """The validation rows are the test split's first QUESTIONS, the test and train splits copied whole (pyarrow's
    reads: pandas.read_parquet aborted at exit on a fresh machine, issue 66)."""
    import pyarrow.parquet as pq

    greedy_agreement.stage_data(str(prepared / "test.parquet"), str(prepared / "train.parquet"), tmp_path)
    test = pq.read_table(prepared / "test.parquet")
    val = pq.read_table(tmp_path / "data" / "val.parquet")
    assert val.num_rows == greedy_agreement.QUESTIONS and val.to_pylist() == test.slice(0, val.num_rows).to_pylist()
    assert pq.read_table(tmp_path / "data" / "test.parquet").equals(test)
    assert (
        pq.read_table(tmp_path / "data" / "train.parquet").num_rows
        == pq.read_table(prepared / "train.parquet").num_rows
    )
