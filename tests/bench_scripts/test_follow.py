"""bench/device/follow.py: a follow-up device call returns as soon as the detached run has ended or died (runs were
lost to waits on a run that had already died), stops at the session's deadline, and copies what the run made."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "bench" / "device"))
import follow  # noqa: E402


def _launch(tmp_path: Path, script: str) -> tuple[subprocess.Popen, list[str]]:
    """A detached stand-in run: writes its pid, then runs `script` (bash) in tmp_path."""
    run = subprocess.Popen(["bash", "-c", f"echo $$ > pid; {script}"], cwd=tmp_path)
    for _ in range(100):
        if (tmp_path / "pid").is_file() and (tmp_path / "pid").read_text().strip():
            break
        time.sleep(0.05)
    return run, ["--pid-file", str(tmp_path / "pid"), "--done", str(tmp_path / "done"), "--poll-s", "0.1"]


def test_returns_when_the_run_is_done_and_copies_its_files(tmp_path, capsys):
    run, args = _launch(tmp_path, "echo step 3 > log; echo '{}' > summary.json; sleep 0.5; touch done; sleep 30")
    started = time.monotonic()
    code = follow.main(
        [
            *args,
            "--limit-s",
            "20",
            "--log",
            str(tmp_path / "log"),
            "--out",
            str(tmp_path / "out"),
            "--collect",
            str(tmp_path / "summary.json"),
            str(tmp_path / "absent.json"),
        ]
    )
    run.kill()
    said = capsys.readouterr().out
    assert code == 0 and time.monotonic() - started < 10
    assert "RUN DONE" in said and "step 3" in said and "not copied" in said and "absent.json" in said
    assert (tmp_path / "out" / "summary.json").read_text() == "{}\n"


def test_returns_as_soon_as_the_run_died_without_its_done_file(tmp_path, capsys):
    run, args = _launch(tmp_path, "sleep 0.5; exit 1")
    started = time.monotonic()
    code = follow.main([*args, "--limit-s", "20", "--out", str(tmp_path / "out")])
    assert code == 4 and time.monotonic() - started < 10
    assert "RUN GONE WITHOUT ITS DONE FILE" in capsys.readouterr().out
    run.wait()


def test_stops_at_the_sessions_deadline_while_the_run_goes_on(tmp_path, capsys):
    run, args = _launch(tmp_path, "sleep 30")
    (tmp_path / "deadline").write_text(f"{int(time.time()) + 1}\n")
    started = time.monotonic()
    code = follow.main(
        [*args, "--limit-s", "20", "--deadline-file", str(tmp_path / "deadline"), "--out", str(tmp_path / "out")]
    )
    run.kill()
    assert code == 3 and time.monotonic() - started < 5
    assert "RUN STILL GOING" in capsys.readouterr().out


def test_nothing_launched_is_said_in_one_line(tmp_path, capsys):
    code = follow.main(["--pid-file", str(tmp_path / "pid"), "--done", str(tmp_path / "done")])
    assert code == 2
    assert capsys.readouterr().out == f"follow: no {tmp_path / 'pid'}: nothing was launched on this machine\n"
