"""A Python snippet run in a fresh interpreter, and what it answers: the last line of its output that is a JSON
object. The doctor's probes and bench's GPU calibration run this way, so that this process holds no CUDA context."""

from __future__ import annotations

import json
import subprocess
import sys


def run_python(code: str, timeout: float) -> tuple[dict | None, subprocess.CompletedProcess]:
    """(the child's last JSON-object line, None where it printed none that parses; the finished child)."""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    try:
        return (json.loads(lines[-1]) if lines else None), child
    except ValueError:
        return None, child


def last_error_line(child: subprocess.CompletedProcess) -> str:
    """The child's last line on stderr: a traceback's conclusion."""
    return (child.stderr.strip().splitlines() or ["no output"])[-1]
