"""The rollout checks' actor (bench/lib/rollout_actor.py) applies the memory cap the bench scripts ask for and records
it in every result (issue 67: the scripts set the product's VERL_P40_GPU_MEMORY_CAP_GB, memcap.apply() reads only the
workers' VERL_P40_WORKER_MEMORY_CAP_GB, and the 2026-12-05 agreement ran uncapped: `memory_cap_fraction: null`);
and its prompts, read with pyarrow (pandas.read_parquet aborted at exit on a fresh machine, issue 66)."""

import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from lib import rollout_actor  # noqa: E402


@pytest.fixture
def applied(monkeypatch):
    """memcap.apply() as on a GPU: the fraction of a 100 GB card the workers' variable asks for."""
    from verl_p40 import memcap

    for name in ("VERL_P40_GPU_MEMORY_CAP_GB", memcap.ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(memcap, "apply", lambda: float(__import__("os").environ[memcap.ENV]) / 100)
    return monkeypatch


@pytest.mark.parametrize("script", ["experiments/rollout_log_probs_gpu.sh", "experiments/rollout_log_probs.py"])
def test_the_cap_the_scripts_set_is_applied_and_recorded(applied, script):
    text = (BENCH / script).read_text()
    sets = dict(re.findall(r"(VERL_P40_\w+_CAP_GB)=(\d+)", text))
    assert sets, f"{script} sets no memory cap"
    for name, value in sets.items():
        applied.setenv(name, value)
    assert rollout_actor._apply_cap(cpu=False) == (24.0, 0.24)
    actor = rollout_actor.Actor(None, None, None, __import__("torch").device("cpu"), lambda: None, 0.24, "m", 24.0)
    head = actor.describe(1, 1)
    assert head["memory_cap_gb"] == 24.0 and head["memory_cap_fraction"] == 0.24


def test_no_cap_asked_is_recorded_as_none_and_one_not_applied_on_a_gpu_stops(applied):
    from verl_p40 import memcap

    assert rollout_actor._apply_cap(cpu=False) == (None, None)
    applied.setenv("VERL_P40_GPU_MEMORY_CAP_GB", "24")
    applied.setattr(memcap, "apply", lambda: None)  # no CUDA: nothing capped
    assert rollout_actor._apply_cap(cpu=True) == (24.0, None)
    with pytest.raises(RuntimeError, match="24 GB was asked for and not applied"):
        rollout_actor._apply_cap(cpu=False)


def test_the_validation_runs_the_update_budget_the_plan_offers(tmp_path):
    """rollout_log_probs_gpu.sh validate hard-coded p40_update_tokens=2048 (the offer before the plan priced rows,
    issue 67): it reads the budget from the plan's `update: ...` line instead, here the p40 snapshot's."""
    import subprocess

    script = BENCH / "experiments" / "rollout_log_probs_gpu.sh"
    assert not re.search(r"p40_update_tokens=\d", script.read_text()), "a hard-coded update budget"
    snapshot = BENCH.parent / "tests" / "unit_plan" / "config_snapshots" / "p40-1gpu-default.txt"
    offer = re.search(r"update: length-grouped micro-batches of (\d+) tokens", snapshot.read_text())  # set on a P40
    notes = tmp_path / "config-notes.txt"
    notes.write_text(snapshot.read_text().split("--- stdout")[0])
    run = subprocess.run(["bash", str(script), "offered-update-tokens", str(notes)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == offer.group(1), (run.stdout, run.stderr)
    notes.write_text("[verl-p40] memory plan for 24.0 GB: ...\n")
    assert subprocess.run(["bash", str(script), "offered-update-tokens", str(notes)], capture_output=True).stdout == b""


def test_prompts_are_the_splits_first_questions_left_padded(prepared, tokenizer_dir):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids, mask, positions = rollout_actor.prompts(tokenizer, str(prepared / "test.parquet"), 3, 256)
    rows = pq.read_table(prepared / "test.parquet").slice(0, 3).to_pylist()
    assert ids.shape == mask.shape == positions.shape == (3, 256)
    for k, row in enumerate(rows):
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        want = tokenizer(text).input_ids
        assert ids[k, -len(want) :].tolist() == want and int(mask[k].sum()) == len(want)  # left-padded
        assert positions[k, -len(want) :].tolist() == list(range(len(want)))
