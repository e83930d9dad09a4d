"""tests/run.sh's first checks, before it creates or touches .venv: a Python the pins have no wheels for is refused in
one line that says how to choose another (issue 68: numpy 1.26.4 has no 3.13 wheel, Markdown 3.11.3 needs 3.11)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _fake_python(tmp_path: Path, version: str) -> Path:
    """A stand-in interpreter that reports `version` to run.sh's two questions (is it 3.11/3.12; which is it)."""
    major, minor = version.split(".")
    fake = tmp_path / f"python{version}"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$2" in *sys.exit*) [ "{minor}" = 11 ] || [ "{minor}" = 12 ]; exit $? ;; esac\n'
        f'echo "Python {major}.{minor}"\n'
    )
    fake.chmod(0o755)
    return fake


def test_run_sh_refuses_a_python_the_pins_have_no_wheels_for(tmp_path):
    for version in ("3.10", "3.13"):
        venv = REPO / ".venv"
        before = venv.exists() and sorted(p.name for p in venv.iterdir())
        result = subprocess.run(
            ["bash", "tests/run.sh", "--version"],
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin", "PYTHON": str(_fake_python(tmp_path, version))},
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
        assert lines == [
            f"tests/run.sh: Python {version} is not 3.11 or 3.12, the versions the pins have wheels for: choose one "
            "with PYTHON=python3.11 bash tests/run.sh"
        ]
        assert (venv.exists() and sorted(p.name for p in venv.iterdir())) == before  # nothing created or changed


def test_run_sh_names_a_python_that_is_not_there():
    result = subprocess.run(
        ["bash", "tests/run.sh", "--version"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHON": "python3.99"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tests/run.sh: 'python3.99' (not found) is not 3.11 or 3.12, the versions the pins have wheels for: choose "
        "one with PYTHON=python3.11 bash tests/run.sh"
    ]
