"""prep's outputs are trusted only when its manifest vouches for them; a killed prep leaves nothing that is trusted
and the next run cleans up; prep never overwrites its own source."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gsm8k_sources
from conftest import REPO, cli
from verl_p40.data import folder_checks
from verl_p40.data import gsm8k as data
from verl_p40.data.manifest import MANIFEST, manifest_problems, request


@pytest.fixture()
def small_source(gsm8k_dir, tmp_path):
    return gsm8k_sources.small_source(gsm8k_dir, tmp_path / "source")


def _prep(source, out, *extra):
    return cli("prep", "--source", str(source), "--out", str(out), *extra)


def test_skip_existing_trusts_the_manifest_only(small_source, tmp_path):
    out = tmp_path / "data"
    first = _prep(small_source, out, "--skip-existing")
    assert first.returncode == 0 and "40 rows" in first.stdout
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["outputs"]["train"]["rows"] == 40 and manifest["limit"] is None
    again = _prep(small_source, out, "--skip-existing")
    assert again.returncode == 0 and "are what this prep would write" in again.stdout


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("zero-byte", "train.parquet is not the file prep wrote"),
        ("no-manifest", "no .verl-p40-data.json"),
        ("hf-export", "train.parquet is not the file prep wrote"),
        ("limit", "made with limit 5, now None"),
        ("other-source", "the source files changed since"),
    ],
)
def test_skip_existing_redoes_what_it_cannot_trust(small_source, tmp_path, damage, reason):
    out = tmp_path / "data"
    assert _prep(small_source, out).returncode == 0
    if damage == "zero-byte":
        (out / "train.parquet").write_bytes(b"")
    elif damage == "no-manifest":
        (out / MANIFEST).unlink()
    elif damage == "hf-export":
        pq.write_table(pa.table({"question": ["q"], "answer": ["#### 1"]}), out / "train.parquet")
    elif damage == "limit":
        assert _prep(small_source, out, "--limit", "5").returncode == 0
    elif damage == "other-source":
        (small_source / "test.jsonl").write_text((small_source / "test.jsonl").read_text().replace("?", "??", 1))
    result = _prep(small_source, out, "--skip-existing")
    assert result.returncode == 0, result.stderr
    assert "preparing again" in result.stderr and reason in result.stderr
    assert pq.ParquetFile(out / "train.parquet").metadata.num_rows == 40
    assert not manifest_problems(
        out, request(str(small_source), None, False, data.DEFAULT_INSTRUCTION), data.written_splits(0)
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_mid_write_then_skip_existing_redoes_it_cleanly(gsm8k_dir, tmp_path, sig):
    """Killed while writing the parquet files: no trusted output, and the next --skip-existing run redoes it."""
    out = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "slow")}
    # slow the parquet writer down so the signal lands while the temporary files exist
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "sitecustomize.py").write_text(
        "import time, pyarrow.parquet as pq\n_w = pq.write_table\n"
        "def write_table(*a, **k):\n    _w(*a, **k)\n    time.sleep(30)\npq.write_table = write_table\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_p40.cli", "prep", "--source", str(gsm8k_dir), "--out", str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(out.glob(".train.parquet.*.tmp")):
        time.sleep(0.1)
    assert list(out.glob(".train.parquet.*.tmp")), "prep never reached the write"
    time.sleep(0.5)  # inside the slowed write_table
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in stderr
    assert not (out / "train.parquet").exists() and not (out / MANIFEST).exists()
    if sig == signal.SIGTERM:  # its own temporary files went with it
        assert not list(out.glob(".*.tmp"))
    redo = _prep(gsm8k_dir, out, "--skip-existing")  # the default's slice too: GSM8K's train split can spare it
    assert redo.returncode == 0 and "7217 rows" in redo.stdout and "256 rows" in redo.stdout, redo.stderr
    assert not list(out.glob(".*.tmp"))
    if sig == signal.SIGKILL:
        assert "left by an interrupted prep" in redo.stderr


def test_prep_refuses_to_overwrite_its_source(gsm8k_dir, tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    for split in data.SPLITS:
        rows = [json.loads(line) for line in (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:10]]
        pq.write_table(pa.Table.from_pylist(rows), export / f"{split}.parquet")
    before = {p.name: p.read_bytes() for p in export.iterdir()}
    result = _prep(export, export)
    assert result.returncode == 2 and "is the --source folder" in result.stderr and "Traceback" not in result.stderr
    assert {p.name: p.read_bytes() for p in export.iterdir()} == before


def test_doctor_sees_a_parquet_changed_after_prep(small_source, tmp_path):
    out = tmp_path / "data"
    assert _prep(small_source, out).returncode == 0
    assert folder_checks.folder_problems(out)[0] == []
    shutil.copy(out / "test.parquet", out / "train.parquet")
    problems, _ = folder_checks.folder_problems(out)
    assert problems == ["train.parquet: changed since verl-p40 prep wrote it (.verl-p40-data.json)"]


def test_prep_onto_a_full_disk_is_one_line_and_leaves_nothing(gsm8k_dir, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)], capture_output=True, text=True
    )
    assert mounted.returncode == 0, f"this test needs root to mount a small tmpfs: {mounted.stderr}"
    try:
        result = _prep(gsm8k_dir, full / "gsm8k")
        left = sorted(p.name for p in (full / "gsm8k").iterdir()) if (full / "gsm8k").exists() else []
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        f"verl-p40 prep: error: --out {full / 'gsm8k'}: cannot write train.parquet, val.parquet, test.parquet, "
        ".verl-p40-data.json (No space left on device)"
    )
    assert left == []  # no partial parquet, no temporary file, no manifest


def test_summary_json_into_a_new_folder(small_source, tmp_path):
    summary = tmp_path / "reports" / "prep.json"
    result = _prep(small_source, tmp_path / "data", "--summary-json", str(summary))
    assert result.returncode == 0 and json.loads(summary.read_text())["splits"]["train"]["rows"] == 40


def test_a_validation_slice_held_out_of_train(small_source, tmp_path):
    """--val-size N: N train rows move to val.parquet (the same ones every time), the test split is untouched, the
    trainer validates on val.parquet, and --skip-existing knows the slice."""
    out = tmp_path / "data"
    result = _prep(small_source, out, "--val-size", "8")
    assert result.returncode == 0, result.stderr
    tables = {split: pq.read_table(out / f"{split}.parquet").to_pylist() for split in ("train", "val", "test")}
    assert [len(tables[s]) for s in ("train", "val", "test")] == [32, 8, 40]
    questions = {s: {r["extra_info"]["question"] for r in rows} for s, rows in tables.items()}
    assert not questions["train"] & questions["val"] and len(questions["train"] | questions["val"]) == 40
    assert {r["extra_info"]["split"] for r in tables["val"]} == {"val"}
    again = tmp_path / "again"
    assert _prep(small_source, again, "--val-size", "8").returncode == 0
    assert (again / "val.parquet").read_bytes() == (out / "val.parquet").read_bytes()  # the same rows each time
    assert "are what this prep would write" in _prep(small_source, out, "--val-size", "8", "--skip-existing").stdout
    redo = _prep(small_source, out, "--skip-existing")  # without the slice now: not what is there
    assert redo.returncode == 0 and "made with val_size 8, now None" in redo.stderr
    assert not (out / "val.parquet").exists() and len(pq.read_table(out / "train.parquet")) == 40

    from verl_p40.plan.planner import plan
    from verl_p40.plan.run_options import RunOptions

    with_val = plan(RunOptions(profile="p40", data=str(again)))
    assert with_val.config().data.val_files == str(again / "val.parquet")
    assert any(n.startswith("validation: val.parquet") for n in with_val.notes)
    assert plan(RunOptions(profile="p40", data=str(out))).config().data.val_files == str(out / "test.parquet")


def test_the_default_slice_trusts_a_folder_made_asking_for_its_size(gsm8k_dir, tmp_path):
    """A data folder of an earlier compose (VAL_SIZE=256 by number) is what prep's default writes: --skip-existing
    keeps it; a manifest that lost the val split is not trusted."""
    out = tmp_path / "data"
    assert _prep(gsm8k_dir, out, "--val-size", "256").returncode == 0
    again = _prep(gsm8k_dir, out, "--skip-existing")
    assert again.returncode == 0, again.stderr
    assert "train.parquet and val.parquet and test.parquet are what this prep would write" in again.stdout
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["outputs"]["val"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    redo = _prep(gsm8k_dir, out, "--skip-existing")
    assert redo.returncode == 0 and "the manifest does not list every split" in redo.stderr


def test_a_validation_slice_as_big_as_train_is_refused(small_source, tmp_path):
    out = tmp_path / "data"
    result = _prep(small_source, out, "--val-size", "40")
    assert result.returncode == 2 and not out.exists()
    assert (
        result.stderr.strip().splitlines()[-1]
        == "verl-p40 prep: error: --val-size 40: the train split has only 40 rows; take fewer (--val-size 0: no "
        "validation slice; the trainer then does not validate)"
    )
    assert "Traceback" not in result.stderr


def test_the_validation_slice_is_decided_once():
    """prep's slice (`ValSlice.of`): the rows held out, the files written and the request that writes the same files
    come from one decision, for the conversion and for --skip-existing alike."""
    default = data.ValSlice.of(None, data.TRAIN_ROWS)
    assert (default.rows, default.splits, default.same()) == (256, ("train", "val", "test"), {"val_size": 256})
    small = data.ValSlice.of(None, 40)  # under the 1,024 train rows the default needs: none
    assert (small.rows, small.splits, small.same()) == (0, ("train", "test"), {"val_size": 0})
    asked = data.ValSlice.of(8, 40)
    assert (asked.rows, asked.splits, asked.same()) == (8, ("train", "val", "test"), {})
