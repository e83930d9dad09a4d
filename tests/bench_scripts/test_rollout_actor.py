"""bench/lib/rollout_actor.py's prompts: the first questions of a prepared split as verl's dataset hands them to the
rollout, read with pyarrow (pandas.read_parquet aborted at exit on a fresh machine, issue 66)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from lib.rollout_actor import prompts  # noqa: E402


def test_prompts_are_the_splits_first_questions_left_padded(prepared, tokenizer_dir):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids, mask, positions = prompts(tokenizer, str(prepared / "test.parquet"), 3, 256)
    rows = pq.read_table(prepared / "test.parquet").slice(0, 3).to_pylist()
    assert ids.shape == mask.shape == positions.shape == (3, 256)
    for k, row in enumerate(rows):
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        want = tokenizer(text).input_ids
        assert ids[k, -len(want) :].tolist() == want and int(mask[k].sum()) == len(want)  # left-padded
        assert positions[k, -len(want) :].tolist() == list(range(len(want)))
