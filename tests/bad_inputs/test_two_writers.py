"""Two writers into one output folder (issue 57): the first is held open on purpose in the middle of its write (a child
process whose write step waits for a file to appear, its temporaries on disk), then a second command into the same
folder runs. It is refused in one line naming the folder and the first process, changes nothing there, and the first
ends whole; a writer killed there holds it no longer, and the next one removes what it left."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from bad_inputs.conftest import snapshot
from conftest import REPO, cli
from gsm8k_sources import small_source
from verl_p40.data.manifest import MANIFEST
from verl_p40.outputs import LEDGER

# verl-p40 ARGS in a child whose MODULE.NAME (a step of the write) waits, once it has done its work, for the file
# `go` to appear, after making the file `started`: the race held open for as long as the test needs
SLOW = """
import importlib, sys, time, pathlib
module, name, started, go, *argv = sys.argv[1:]
target = importlib.import_module(module)
original = getattr(target, name)
def slow(*args, **kwargs):
    result = original(*args, **kwargs)
    pathlib.Path(started).touch()
    while not pathlib.Path(go).exists():
        time.sleep(0.05)
    return result
setattr(target, name, slow)
from verl_p40 import cli
sys.exit(cli.main(argv))
"""


def slow_writer(tmp: Path, where: str, *argv: str) -> tuple[subprocess.Popen, Path]:
    """The first writer, started and waited for until it is inside its write: its process, the file that frees it."""
    module, name = where.rsplit(".", 1)
    started, go = tmp / "started", tmp / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW, module, name, str(started), str(go), *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not started.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the first writer never reached its write"
        time.sleep(0.05)
    return child, go


def one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr + result.stdout
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and not ln.startswith("[verl-p40]")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def second_is_refused(first, out: Path, *args: str) -> None:
    """The same command into `out` while `first` holds it: exit 2, the one line naming the first, `out` untouched."""
    before = snapshot(out)
    second = cli(*args)
    line = one_line(second)
    assert second.returncode == 2, second.stderr
    assert line == (
        f"verl-p40 {args[0]}: error: --out {out}: verl-p40 {args[0]} (pid {first.pid}) is writing into this folder; "
        "wait for it to end, or choose another --out"
    )
    assert snapshot(out) == before  # the first one's temporaries as they were


def test_a_second_export_into_a_folder_being_written_is_refused_and_the_first_ends_whole(tiny_model, tmp_path):
    out = tmp_path / "exported"
    args = ("export", "--model", str(tiny_model), "--out", str(out), "--dtype", "fp32")
    first, go = slow_writer(tmp_path, "verl_p40.models.export.hf_folder", *args)
    try:
        assert temporaries(out), "the first export is inside its write: its temporary folder is there"
        second_is_refused(first, out, *args)
    finally:
        go.touch()
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    model = out / f"{tiny_model.name}-hf-fp32"
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    assert sorted(p.name for p in out.iterdir()) == sorted([LEDGER, model.name])  # no temporary, no lock left


def test_a_second_prep_never_removes_the_first_ones_temporaries(gsm8k_dir, tmp_path):
    source = small_source(gsm8k_dir, tmp_path / "src")
    out = tmp_path / "prepared"
    args = ("prep", "--source", str(source), "--out", str(out))
    first, go = slow_writer(tmp_path, "verl_p40.data.gsm8k.manifest_text", *args)
    try:
        held = temporaries(out)
        assert held, "the first prep is inside its write: its temporary files are there"
        second_is_refused(first, out, *args)
        assert temporaries(out) == held
    finally:
        go.touch()
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert (out / "train.parquet").is_file() and (out / "test.parquet").is_file() and (out / MANIFEST).is_file()
    assert temporaries(out) == []
    assert cli("prep", "--source", str(source), "--out", str(out), "--skip-existing").returncode == 0


def test_a_writer_killed_in_its_write_holds_the_folder_no_longer(gsm8k_dir, tmp_path):
    source = small_source(gsm8k_dir, tmp_path / "src")
    out = tmp_path / "prepared"
    args = ("prep", "--source", str(source), "--out", str(out))
    first, go = slow_writer(tmp_path, "verl_p40.data.gsm8k.manifest_text", *args)
    held = temporaries(out)
    assert cli(*args).returncode == 2  # refused while the first lives
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert temporaries(out) == held  # what the kill left
    after = cli(*args)  # the kernel dropped the dead one's lock: nothing to remove by hand
    assert after.returncode == 0, after.stderr
    assert "Traceback" not in after.stderr
    assert all(f"removed {out / name} (left by an interrupted prep)" in after.stderr for name in held)
    assert temporaries(out) == []
    assert cli("prep", "--source", str(source), "--out", str(out), "--skip-existing").returncode == 0
