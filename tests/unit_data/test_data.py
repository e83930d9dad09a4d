import json
import os

import pyarrow.parquet as pq
import pytest

from conftest import cli
from verl_p40.data import gsm8k as data


def _jsonl(path, rows, newline="\n"):
    path.write_bytes(newline.join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode() + newline.encode())


def _good(i=0, answer="#### 1,234"):
    return {"question": f"What is {i}?", "answer": f"Step one.\n{answer}"}


def test_full_gsm8k_counts_and_ground_truths(prepared, gsm8k_dir):
    from verl_p40.data.gsm8k import TRAIN_ROWS  # every "h an epoch" counts from it (perf/projection.py)

    for split, expected in (("train", TRAIN_ROWS), ("test", 1319)):
        table = pq.read_table(prepared / f"{split}.parquet").to_pylist()
        assert len(table) == expected
        source = [json.loads(line) for line in (gsm8k_dir / f"{split}.jsonl").read_text().splitlines() if line.strip()]
        for row, raw in zip(table, source):
            final = raw["answer"].rsplit("#### ", 1)[1].strip().replace(",", "")
            assert row["reward_model"] == {"style": "rule", "ground_truth": final}
            assert row["extra_info"]["question"] == raw["question"] and row["extra_info"]["split"] == split
        assert [r["extra_info"]["index"] for r in table] == list(range(expected))


def test_row_schema_matches_verl_gsm8k_example(prepared):
    row = pq.read_table(prepared / "test.parquet").slice(0, 1).to_pylist()[0]
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert row["prompt"] == [
        {"role": "user", "content": row["extra_info"]["question"] + " " + data.DEFAULT_INSTRUCTION}
    ]
    assert data.DEFAULT_INSTRUCTION == 'Let\'s think step by step and output the final answer after "####".'


def test_parquet_loads_with_verl_rlhf_dataset(prepared, tokenizer_dir):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = OmegaConf.create(
        {
            "max_prompt_length": 320,
            "filter_overlong_prompts": True,
            "truncation": "error",
            "prompt_key": "prompt",
            "return_raw_chat": False,
        }
    )
    dataset = RLHFDataset(data_files=[str(prepared / "test.parquet")], tokenizer=tokenizer, config=config)
    assert len(dataset) == 1319
    item = dataset[5]
    assert item["input_ids"].shape[-1] == 320
    assert item["reward_model"]["ground_truth"].lstrip("-").replace(".", "").isdigit()
    text = tokenizer.decode(item["raw_prompt_ids"])
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"question": "q?"}), "missing field 'answer'"),
        (json.dumps({"answer": "#### 3"}), "missing field 'question'"),
        (
            json.dumps({"question": "q?", "answer": "no final answer"}),
            'answer has no numeric final answer after "#### "',
        ),
        (json.dumps({"question": "q?", "answer": "#### seven"}), "answer has no numeric final answer"),
        (json.dumps(["a", "list"]), "expected a JSON object"),
        # rows no GSM8K file holds: named, never a crash (the first two were a RecursionError and a UnicodeEncodeError)
        ("[" * 100_000 + "]" * 100_000, "not valid JSON for a row (nested too deeply)"),
        (
            '{"question": "caf\\ud800?", "answer": "#### 1"}',
            "field 'question' holds an invalid Unicode escape (a lone surrogate \\ud800 at character 4)",
        ),
        ('{"question": "a", "answer": "#### 1", "question": "b"}', "key 'question' is given twice"),
        (json.dumps({"question": "x" * 2**21, "answer": "#### 1"}), "a line of 2097189 bytes, not a GSM8K row"),
        ("\ufeff" + json.dumps(_good()), "not valid JSON (Unexpected UTF-8 BOM"),  # a BOM is a BOM only at the start
    ],
    ids=lambda value: value[:24],  # the rows themselves can be megabytes
)
def test_malformed_row_stops_with_file_line_and_leaves_nothing(tmp_path, bad_line, reason):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _jsonl(src / "train.jsonl", [_good(0), "", _good(1), bad_line, _good(2)])
    _jsonl(src / "test.jsonl", [_good(3)])
    result = cli("prep", "--source", str(src), "--out", str(out))
    assert result.returncode == 2
    assert f"{src / 'train.jsonl'}:4: {reason}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_a_byte_order_mark_is_read_past_and_utf16_is_named(tmp_path):
    """Windows editors save UTF-8 with a byte-order mark: the file reads as without; UTF-16 is said to be UTF-16."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _jsonl(src / "train.jsonl", [_good(0), _good(1)], newline="\r\n")
    (src / "train.jsonl").write_bytes(b"\xef\xbb\xbf" + (src / "train.jsonl").read_bytes())
    _jsonl(src / "test.jsonl", [_good(2)])
    result = cli("prep", "--source", str(src), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert pq.read_table(out / "train.parquet").to_pylist()[0]["extra_info"]["question"] == "What is 0?"
    (src / "test.jsonl").write_bytes(json.dumps(_good(2)).encode("utf-16"))
    utf16 = cli("prep", "--source", str(src), "--out", str(tmp_path / "other"))
    assert utf16.returncode == 2 and utf16.stderr.strip().splitlines() == [
        f"verl-p40 prep: error: {src / 'test.jsonl'}:1: UTF-16 text (it starts with a UTF-16 byte-order mark); "
        "save the file as UTF-8"
    ]


def test_failure_in_test_split_leaves_no_train_parquet_either(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _jsonl(src / "train.jsonl", [_good(0)])
    _jsonl(src / "test.jsonl", [_good(1), "{oops"])
    assert cli("prep", "--source", str(src), "--out", str(out)).returncode == 2
    assert not out.exists() or list(out.iterdir()) == []


def test_skip_invalid_counts_and_reports(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _jsonl(src / "train.jsonl", [_good(0), "{bad", _good(1), json.dumps({"question": "x"})])
    _jsonl(src / "test.jsonl", [_good(2)])
    result = cli("prep", "--source", str(src), "--out", str(out), "--skip-invalid")
    assert result.returncode == 0, result.stderr
    assert "2 rows" in result.stdout and "(2 invalid rows skipped)" in result.stdout
    assert f"{src / 'train.jsonl'}:2" in result.stderr
    assert pq.read_table(out / "train.parquet").num_rows == 2


def test_crlf_blank_lines_limit_and_commas(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    _jsonl(src / "train.jsonl", [_good(i, "#### -1,234.5") for i in range(5)] + [""], newline="\r\n")
    _jsonl(src / "test.jsonl", ["", _good(9)], newline="\r\n")
    result = cli("prep", "--source", str(src), "--out", str(out), "--limit", "3", "--instruction", "Answer:")
    assert result.returncode == 0, result.stderr
    rows = pq.read_table(out / "train.parquet").to_pylist()
    assert len(rows) == 3 and rows[0]["reward_model"]["ground_truth"] == "-1234.5"
    assert rows[0]["prompt"][0]["content"] == "What is 0? Answer:"
    assert not rows[0]["extra_info"]["question"].endswith("\r")
    assert not (out / "val.parquet").exists()  # 3 train rows: the default holds no validation slice out
    assert "no val.parquet: the train split's 3 rows are under the 1024" in result.stdout


def test_huggingface_parquet_export_source(tmp_path, gsm8k_dir):
    import pyarrow as pa

    export = tmp_path / "export" / "main"
    export.mkdir(parents=True)
    for split in ("train", "test"):
        rows = [json.loads(x) for x in (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:7]]
        pq.write_table(pa.Table.from_pylist(rows), export / f"{split}-00000-of-00001.parquet")
    result = cli("prep", "--source", str(tmp_path / "export"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert pq.read_table(tmp_path / "out" / "test.parquet").num_rows == 7


def test_parquet_source_missing_column_is_named(tmp_path):
    import pyarrow as pa

    (tmp_path / "src").mkdir()
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist([{"question": "q"}]), tmp_path / "src" / f"{split}.parquet")
    result = cli("prep", "--source", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "lacks column(s) answer" in result.stderr


def test_missing_source_and_offline_hub_are_clear(tmp_path):
    result = cli("prep", "--source", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "not a folder" in result.stderr
    offline = cli(
        "prep",
        "--source",
        "hf:openai/gsm8k",
        "--out",
        str(tmp_path / "out"),
        "--cache-dir",
        str(tmp_path / "cache"),
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert offline.returncode == 2 and "could not load openai/gsm8k" in offline.stderr
    assert "Traceback" not in offline.stderr


def test_hub_source_goes_through_datasets(monkeypatch, tmp_path):
    """The hf: path hands the repo, config and cache dir to datasets.load_dataset (stubbed: no hub here)."""
    import datasets

    seen = {}

    def fake_load(repo, name, cache_dir=None):
        seen.update(repo=repo, name=name, cache_dir=cache_dir)
        return {split: [_good(i)] for i, split in enumerate(("train", "test"))}

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    results, paths = data.prepare("hf:openai/gsm8k", tmp_path / "out", cache_dir=str(tmp_path / "c"))
    assert seen == {"repo": "openai/gsm8k", "name": "main", "cache_dir": str(tmp_path / "c")}
    assert paths["test"].is_file() and len(results["train"].rows) == 1


def test_tokenizer_statistics(tmp_path, gsm8k_dir, tokenizer_dir):
    result = cli(
        "prep",
        "--source",
        str(gsm8k_dir),
        "--out",
        str(tmp_path / "o"),
        "--limit",
        "50",
        "--tokenizer",
        str(tokenizer_dir),
        "--summary-json",
        str(tmp_path / "s.json"),
    )
    assert result.returncode == 0, result.stderr
    stats = json.loads((tmp_path / "s.json").read_text())["splits"]["train"]["prompt_tokens"]
    assert 60 < stats["mean"] < 200 and stats["p50"] <= stats["p99"] <= stats["max"]


def test_a_tokenizer_whose_chat_template_cannot_run_stops_prep_before_it_writes(tmp_path, gsm8k_dir, tokenizer_dir):
    # transformers does not install jinja2, which apply_chat_template needs: a missing one is named in one line before
    # any file is written, not a traceback after the parquet files are
    # (None in sys.modules: transformers finds no jinja2 and imports, as where it was never installed)
    absent = tmp_path / "no-jinja2"
    absent.mkdir()
    (absent / "sitecustomize.py").write_text('import sys\nsys.modules["jinja2"] = None\n')
    out = tmp_path / "o"
    path = f"{absent}:{os.environ.get('PYTHONPATH', '')}"
    result = cli(
        "prep", "--source", str(gsm8k_dir), "--out", str(out), "--limit", "50", "--tokenizer", str(tokenizer_dir),
        "--summary-json", str(tmp_path / "s.json"), env={"PYTHONPATH": path},
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "jinja2" in lines[0] and str(tokenizer_dir) in lines[0], lines
    assert not out.exists() and not (tmp_path / "s.json").exists()
