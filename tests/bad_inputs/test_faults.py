"""Faults while prep, eval and export write: a disk that fills at each of their write steps, a read-only output
folder, and SIGTERM in the middle. Each ends in one line (or exit 130 for the signal), leaves no temporary file and
nothing a later run would take for complete, and leaves what was there before as it was; a later run on a disk with
room completes from there.

The disk is a small tmpfs these tests mount (they run as root, as CI does; without root they fail and say so).
Where it fills: a first run in the same place measures what each step writes; then, for each step in turn, the disk is
filled (a preallocated file beside the output folder) so that every earlier step fits and that step does not."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bad_inputs.conftest import snapshot
from conftest import REPO, cli
from gsm8k_sources import small_source
from verl_p40.data.manifest import MANIFEST
from verl_p40.outputs import LEDGER

PAGE = 4096
NO_SPACE = os.strerror(28)
PROGRESS = re.compile(r"^[\w ]+: +\d+%\|")  # a tqdm bar (eval's progress on stderr), not a message


@contextlib.contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.fail(
            "the fault tests mount a small tmpfs, which needs root (CI runs them as root): "
            + (mounted.stderr.decode().strip() or f"mount exited {mounted.returncode}")
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def read_only(disk: Path) -> None:
    remounted = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
    assert remounted.returncode == 0, remounted.stderr


def pages(size: int) -> int:
    return -(-size // PAGE)


def fill(disk: Path, free_pages: int) -> None:
    """Leave `free_pages` pages free on `disk` (a preallocated file beside the output folder)."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    stat = os.statvfs(disk)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        os.posix_fallocate(fd, 0, stat.f_bavail * stat.f_frsize - free_pages * PAGE)
    finally:
        os.close(fd)
    stat = os.statvfs(disk)
    assert stat.f_bavail * stat.f_frsize == free_pages * PAGE


def at_each_step(disk: Path, out: Path, steps: list[tuple[str, int]]) -> Iterator[str]:
    """For each (step, pages it writes) in turn: `out` emptied and the disk filled so that the step does not fit."""
    assert all(need >= 1 for _, need in steps), steps  # a step that writes no new page cannot be made to fail
    before = 0
    for step, need in steps:
        shutil.rmtree(out, ignore_errors=True)
        fill(disk, before + need // 2)
        yield step
        before += need


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = [
        ln
        for ln in result.stderr.splitlines()
        if ln.strip() and not ln.startswith("[verl-p40]") and not PROGRESS.match(ln)
    ]
    assert len(lines) == 1, result.stderr
    return lines[0]


def left(out: Path) -> list[str]:
    names = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert not [n for n in names if n.endswith(".tmp")], names  # no temporary file stays
    return names


@pytest.fixture()
def source(gsm8k_dir, tmp_path) -> Path:
    return small_source(gsm8k_dir, tmp_path / "source")


# ---------------------------------------------------------------------------------------------- a full disk


def test_prep_on_a_disk_that_fills_at_each_write_step(source, tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        out = disk / "data"
        argv = ["prep", "--source", str(source), "--out", str(out), "--summary-json", str(out / "summary.json")]
        assert cli(*argv).returncode == 0  # where each step's bytes go
        size = {p.name: p.stat().st_size for p in out.iterdir()}
        steps = [(name, pages(size[name])) for name in ("train.parquet", "test.parquet", MANIFEST)]
        steps += [(LEDGER, 1), ("summary.json", pages(size["summary.json"])), (f"{LEDGER} again", 1)]
        for step in at_each_step(disk, out, steps):
            line = one_line(cli(*argv))
            assert line.endswith(f"({NO_SPACE})"), (step, line)
            if step in ("summary.json", f"{LEDGER} again"):  # the data is complete and trusted; only the summary failed
                assert line.startswith(f"verl-p40 prep: error: --summary-json {out}: cannot write summary.json")
                assert left(out) == sorted([LEDGER, MANIFEST, "test.parquet", "train.parquet"])
                trusted = cli(*argv[:5], "--skip-existing")
                assert "are what this prep would write" in trusted.stdout, (step, trusted.stderr)
            else:  # nothing: no parquet file, no manifest, no ledger
                assert line.startswith(f"verl-p40 prep: error: --out {out}: cannot write train.parquet, test.parquet")
                assert not out.exists(), step  # not even the folder
        (disk / "filler").unlink()
        assert cli(*argv).returncode == 0


def test_eval_on_a_disk_that_fills_at_each_write_step(tiny_model, prepared, tmp_path):
    (tmp_path / "no-logs").mkdir()
    with small_disk(tmp_path / "disk") as disk:
        out = disk / "eval"
        argv = [
            "eval", "--model", str(tiny_model), "--data", str(prepared / "test.parquet"), "--out", str(out),
            "--device", "cpu", "--limit", "8", "--batch-size", "4", "--max-new-tokens", "48",
            "--logs", str(tmp_path / "no-logs"),
        ]  # fmt: skip
        assert cli(*argv).returncode == 0
        lines = (out / "answers.jsonl").read_bytes().splitlines(keepends=True)
        first = sum(map(len, lines[:4]))
        size = {p.name: p.stat().st_size for p in out.iterdir()}
        steps = [("batch 1", pages(first)), ("batch 2", pages(size["answers.jsonl"]) - pages(first))]
        steps += [(name, pages(size[name])) for name in ("report.json", "report.md")] + [(LEDGER, 1)]
        for step in at_each_step(disk, out, steps):
            line = one_line(cli(*argv))
            assert line.startswith(f"verl-p40 eval: error: --out {out}: cannot write") and line.endswith(
                f"({NO_SPACE})"
            ), (step, line)
            answered = [json.loads(x)["index"] for x in (out / "answers.jsonl").read_text().splitlines()] if (
                out / "answers.jsonl"
            ).exists() else []  # fmt: skip
            assert answered == {"batch 1": [], "batch 2": [0, 1, 2, 3]}.get(step, list(range(8))), step
            assert left(out) == (["answers.jsonl"] if answered else []), step  # no report, no ledger
            assert answered or not out.exists(), step  # not one answer: not even the folder
        (disk / "filler").unlink()
        kept = (out / "answers.jsonl").read_bytes()
        assert cli(*argv).returncode == 0  # a later run reports what was answered, and answers nothing again
        assert (out / "answers.jsonl").read_bytes() == kept
        assert left(out) == sorted([LEDGER, "answers.jsonl", "report.json", "report.md"])


def test_export_on_a_disk_that_fills_at_each_write_step_and_over_its_previous_output(tiny_model, tmp_path):
    with small_disk(tmp_path / "disk", size="160m") as disk:
        out = disk / "exports"
        argv = ["export", "--model", str(tiny_model), "--out", str(out), "--gguf", "f16"]
        assert cli(*argv).returncode == 0
        name = tiny_model.name
        folder = sum(pages(p.stat().st_size) for p in (out / f"{name}-hf-fp16").iterdir())
        steps = [("Hugging Face folder", folder), ("GGUF", pages((out / f"{name}-f16.gguf").stat().st_size))]
        for step in at_each_step(disk, out, [*steps, (LEDGER, 1)]):
            line = one_line(cli(*argv))
            assert line == (
                f"verl-p40 export: error: --out {out}: cannot write {name}-hf-fp16, {name}-f16.gguf ({NO_SPACE})"
            ), step
            assert not out.exists(), step  # not even the folder
        (disk / "filler").unlink()
        assert cli(*argv).returncode == 0
        before = snapshot(out)
        fill(disk, (folder + steps[1][1]) // 2)  # again, over its own previous output: the disk fills half way
        assert NO_SPACE in one_line(cli(*argv))
        assert snapshot(out) == before and left(out) == sorted([LEDGER, f"{name}-f16.gguf", f"{name}-hf-fp16"])


# ---------------------------------------------------------------------------------------------- read-only


def test_a_read_only_output_folder_is_one_line_before_any_work_and_changes_nothing(source, tiny_model, tmp_path):
    """Each command's earlier output on a disk mounted read-only since: the next run says so first (eval before it
    generates a single answer) and changes nothing; a new folder there the same."""
    with small_disk(tmp_path / "disk", size="64m") as disk:
        runs = {
            "prep": ["prep", "--source", str(source), "--out", str(disk / "data")],
            "eval": [
                "eval", "--model", str(tiny_model), "--data", str(disk / "data" / "test.parquet"), "--out",
                str(disk / "eval"), "--device", "cpu", "--limit", "2", "--max-new-tokens", "4",
            ],
            "export": ["export", "--model", str(tiny_model), "--out", str(disk / "exports")],
        }  # fmt: skip
        for argv in runs.values():
            assert cli(*argv).returncode == 0, argv
        before = snapshot(disk)
        read_only(disk)
        again = {
            "prep": [*runs["prep"], "--limit", "5"],
            "eval": [*runs["eval"], "--limit", "3"],  # one more answer to write
            "export": [*runs["export"], "--dtype", "fp32"],
            "a new folder": ["prep", "--source", str(source), "--out", str(disk / "new" / "data")],
        }
        outs = {"prep": disk / "data", "eval": disk / "eval", "export": disk / "exports", "a new folder": disk}
        for command, argv in again.items():
            started = time.perf_counter()
            line = one_line(cli(*argv))
            where = f"--out {outs[command] / 'new' / 'data' if command == 'a new folder' else outs[command]}"
            assert line.endswith(f"{where}: cannot write there ({outs[command]} is on a read-only file system)"), line
            if command == "eval":
                assert time.perf_counter() - started < 60  # refused before the model was loaded
        assert snapshot(disk) == before


# ---------------------------------------------------------------------------------------------- interrupted

HOOK = """
import os, time
_out, _at = os.environ["FAULT_OUT"], os.environ["FAULT_AT"]

def _pause():
    open(_out + ".paused", "w").close()
    time.sleep(120)

if _at == "rename":  # every output written under its temporary name; none renamed yet
    _replace, _seen = os.replace, []
    def _hooked(src, dst, *a, **k):
        if str(dst).startswith(_out) and not _seen:
            _seen.append(dst)
            _pause()
        return _replace(src, dst, *a, **k)
    os.replace = _hooked
elif _at == "weights":  # export: the Hugging Face folder's weights written, the rest of it not
    import safetensors.torch
    _save = safetensors.torch.save_file
    def _saved(*a, **k):
        _save(*a, **k)
        _pause()
    safetensors.torch.save_file = _saved
elif _at == "batch 2":  # eval: the first batch's answers appended, the second being generated
    from verl_p40.evaluation import generation
    _call, _calls = generation.HfGenerator.__call__, []
    def _generate(self, prompts):
        _calls.append(1)
        if len(_calls) == 2:
            _pause()
        return _call(self, prompts)
    generation.HfGenerator.__call__ = _generate
"""


def interrupted(tmp_path: Path, argv: list[str], out: Path, at: str) -> subprocess.CompletedProcess:
    """Run `verl-p40 ARGV`, stopped with SIGTERM at `at`."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    paused = Path(f"{out}.paused")
    paused.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "FAULT_OUT": str(out),
        "FAULT_AT": at,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_p40.cli", *argv], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while not paused.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert paused.exists(), f"never reached {at}: {proc.communicate()}"
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr, (proc.returncode, stderr)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def test_sigterm_while_export_writes_leaves_nothing_and_its_previous_output_as_it_was(tiny_model, tmp_path):
    out = tmp_path / "exports"
    argv = ["export", "--model", str(tiny_model), "--out", str(out), "--gguf", "f16"]
    interrupted(tmp_path, argv, out, "weights")  # half of the Hugging Face folder written
    assert not out.exists()  # not even the folder
    assert cli(*argv).returncode == 0
    before = snapshot(out)
    interrupted(tmp_path, argv, out, "rename")  # again, over its previous output: all written, nothing renamed
    name = tiny_model.name
    assert snapshot(out) == before and left(out) == sorted([LEDGER, f"{name}-f16.gguf", f"{name}-hf-fp16"])


def test_sigterm_while_eval_writes_keeps_whole_batches_and_writes_no_report(tiny_model, prepared, tmp_path):
    out = tmp_path / "eval"
    argv = [
        "eval", "--model", str(tiny_model), "--data", str(prepared / "test.parquet"), "--out", str(out),
        "--device", "cpu", "--limit", "4", "--batch-size", "2", "--max-new-tokens", "8", "--logs", str(tmp_path),
    ]  # fmt: skip
    interrupted(tmp_path, argv, out, "batch 2")
    assert left(out) == ["answers.jsonl"]
    assert [json.loads(x)["index"] for x in (out / "answers.jsonl").read_text().splitlines()] == [0, 1]
    interrupted(tmp_path, argv, out, "rename")  # every answer written, the reports not yet renamed into place
    assert left(out) == ["answers.jsonl"] and len((out / "answers.jsonl").read_text().splitlines()) == 4
    assert cli(*argv).returncode == 0 and left(out) == sorted([LEDGER, "answers.jsonl", "report.json", "report.md"])


def test_sigterm_before_prep_renames_leaves_its_previous_output_trusted(source, tmp_path):
    out = tmp_path / "data"
    argv = ["prep", "--source", str(source), "--out", str(out)]
    assert cli(*argv).returncode == 0
    before = snapshot(out)
    interrupted(tmp_path, [*argv, "--limit", "10"], out, "rename")
    assert snapshot(out) == before and left(out) == sorted([LEDGER, MANIFEST, "test.parquet", "train.parquet"])
    assert "are what this prep would write" in cli(*argv, "--skip-existing").stdout


def test_the_faults_page_names_tests_that_exist():
    """docs/faults.md backs each line with `tests/FILE::test` (and `::test` for another of the same file)."""
    text = (REPO / "docs" / "faults.md").read_text(encoding="utf-8")
    named, current = [], None
    for path, name in re.findall(r"`(tests/[\w/]+\.py)?::(test_\w+)`", text):
        current = path or current
        named.append((current, name))
    assert len(named) >= 20
    missing = [f"{path}::{name}" for path, name in named if f"def {name}(" not in (REPO / path).read_text()]
    assert not missing, missing
