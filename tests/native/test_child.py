"""tests/native/child.py: a native crash in a child process fails one test, names its signal, and the suite goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from native.child import ChildCrashed, ChildFailed, describe, in_child

TESTS = Path(__file__).resolve().parents[1]


def _die(signum: int) -> None:
    os.kill(os.getpid(), signum)


def _values(n: int) -> tuple:
    return np.arange(n, dtype=np.float32), {"n": n}


def _raise() -> None:
    raise ValueError("bad row 7")


@pytest.mark.parametrize(
    "signum, name", [(signal.SIGILL, "SIGILL (signal 4)"), (signal.SIGSEGV, "SIGSEGV (signal 11)")]
)
def test_a_child_killed_by_a_signal_is_a_failure_naming_it(signum, name):
    with pytest.raises(ChildCrashed) as failed:
        in_child(_die, signum, what="the q8_0 decode")
    assert str(failed.value) == f"the q8_0 decode: the child process died with {name} before it returned"


def test_a_childs_result_and_exception_come_back():
    got = in_child(_values, 5)
    assert got[0].tolist() == [0, 1, 2, 3, 4] and got[1] == {"n": 5}
    with pytest.raises(ChildFailed, match=r"llama.cpp, in the child process: ValueError: bad row 7\n.*Traceback"):
        in_child(_raise, what="llama.cpp")
    assert describe(-4) == "SIGILL (signal 4)" and describe(3) == "exit 3"


def _run_suite(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_crash_demo.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def test_a_crash_in_a_child_fails_one_test_and_the_rest_of_the_suite_runs(tmp_path):
    """Three tests, the middle one's native call dies with SIGILL: pytest reports 1 failed, 2 passed, exit 1,
    and the failure names the signal. The same crash outside a child takes pytest down (exit -4, no summary)."""
    isolated = _run_suite(
        tmp_path,
        """
        import os, signal
        from native.child import in_child

        def crash():
            os.kill(os.getpid(), signal.SIGILL)

        def test_before():
            pass

        def test_native_crash():
            in_child(crash, what="llama.cpp decode")

        def test_after():
            pass
        """,
    )
    out = isolated.stdout + isolated.stderr
    assert isolated.returncode == 1, out
    assert "1 failed, 2 passed" in out, out
    assert "llama.cpp decode: the child process died with SIGILL (signal 4) before it returned" in out, out

    bare = _run_suite(
        tmp_path,
        """
        import os, signal

        def test_before():
            pass

        def test_native_crash():
            os.kill(os.getpid(), signal.SIGILL)

        def test_after():
            pass
        """,
    )
    assert bare.returncode == -signal.SIGILL, bare.stdout + bare.stderr
    assert "passed" not in bare.stdout  # no summary: the run died with its test
