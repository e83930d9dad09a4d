""".ci/run goes on after a failed step: every step runs, and the exit is non-zero naming each step that failed.

The script itself runs here, in a copy of the repository's layout where each command it calls is a stand-in that
records it ran and exits as told; the real steps ran in a branch's CI (bench/results/ci-fresh-2026-12-06)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDINS = {  # path -> the stand-in's name in the log; the suite fails where FAIL names it
    "tests/run.sh": "run.sh",
    ".venv/bin/python": "pytest-second-pass",
    ".venv/bin/ruff": "ruff",
    "docker/check-lock.sh": "lock",
    "docker/e2e/engine.sh": "engine",
    "docker/e2e/build.sh": "build",
    "docker/e2e/run.sh": "e2e",
}


def _layout(tmp_path: Path, failing: set[str]) -> Path:
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")
    for path, name in STANDINS.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        # run.sh's setup (--version) passes; its suite (-q ...) fails where "suite" is in `failing`
        said = "suite" if name == "run.sh" else name
        fail = '[ "$1" = --version ] || exit 1' if said in failing else ""
        if name == "run.sh" and "setup" in failing:
            fail = "exit 1"
        target.write_text(f'#!/bin/sh\necho "{name} $*" >> "$CI_TRACE"\n{fail}\nexit 0\n')
        target.chmod(0o755)
    return root


def _ci(root: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    trace = tmp_path / "trace"
    env = {**os.environ, "CI_TRACE": str(trace), "E2E_DIR": str(tmp_path / "e2e"), "E2E_LOG": str(tmp_path / "e2e.log")}
    result = subprocess.run(["bash", str(root / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=120)
    return result, trace.read_text().splitlines()


def test_a_failed_suite_is_named_and_every_later_step_still_runs(tmp_path):
    result, trace = _ci(_layout(tmp_path, {"suite"}), tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    ran = [line.split()[0] for line in trace]
    # every step ran: setup, the suite, the second pass, both ruff calls, the lock check, the build, the e2e
    assert ran.count("run.sh") == 2 and ran.count("ruff") == 2
    assert {"pytest-second-pass", "lock", "engine", "build", "e2e"} <= set(ran)
    assert ".ci/run: 1 step(s) failed: suite under the P40 stand-in NVML (tests/run.sh)" in result.stdout
    assert "suite under the P40 stand-in NVML (tests/run.sh): FAILED (exit 1)" in result.stdout


def test_every_failed_step_is_named_in_the_last_line(tmp_path):
    result, _ = _ci(_layout(tmp_path, {"ruff", "lock", "e2e"}), tmp_path)
    assert result.returncode == 1
    assert result.stdout.strip().splitlines()[-1] == (
        ".ci/run: 4 step(s) failed: ruff check; ruff format --check; image lock check (docker/check-lock.sh); "
        "e2e: the stack on a real Docker engine (docker/e2e/run.sh)"
    )


def test_all_steps_passing_exit_0_with_a_summary(tmp_path):
    result, _ = _ci(_layout(tmp_path, set()), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == ".ci/run: every step passed"
    summary = lines[lines.index(next(x for x in lines if x.startswith("=== .ci/run summary"))) + 1 : -1]
    assert len(summary) == 8 and all(" passed " in line for line in summary), summary


def test_a_failed_setup_runs_what_needs_no_venv_and_not_the_setup_again(tmp_path):
    """The steps that need .venv are recorded as not run (tests/run.sh would start the binding's ~10-minute build
    again); the lock check, the image build and the e2e still run."""
    result, trace = _ci(_layout(tmp_path, {"setup"}), tmp_path)
    assert result.returncode == 1
    ran = [line.split()[0] for line in trace]
    assert ran.count("run.sh") == 1 and "ruff" not in ran and "pytest-second-pass" not in ran
    assert {"lock", "build", "e2e"} <= set(ran)
    assert "suite under the P40 stand-in NVML (tests/run.sh): not run (setup failed)" in result.stdout
    assert (
        result.stdout.strip()
        .splitlines()[-1]
        .startswith(
            ".ci/run: 5 step(s) failed: setup: .venv, the test stack, llama.cpp's binding (tests/run.sh); suite under"
        )
    )


def test_a_background_step_that_dies_without_a_result_is_a_failure_not_a_hang(tmp_path):
    root = _layout(tmp_path, set())
    # the lock check's stand-in kills the subshell that would write its result
    (root / "docker" / "check-lock.sh").write_text('#!/bin/sh\necho "lock" >> "$CI_TRACE"\nkill -9 $PPID\n')
    result, _ = _ci(root, tmp_path)
    assert result.returncode == 1, result.stdout
    assert "image lock check (docker/check-lock.sh): FAILED (exit died)" in result.stdout
