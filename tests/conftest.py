"""Shared test fixtures. Tests run offline against ../shared (found relative to the repo root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VERL_P40_SHARED", REPO.parent / "shared"))


def _shared(sub: str) -> Path:
    path = SHARED / sub
    if not path.exists():
        pytest.fail(f"test data missing: {path} (the repo expects ../shared/data beside it; set VERL_P40_SHARED)")
    return path


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    return _shared("data/gsm8k")


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return _shared("data/qwen2.5-0.5b-instruct")


@pytest.fixture(scope="session")
def prepared(gsm8k_dir, tmp_path_factory) -> Path:
    """The full GSM8K converted once per session by the real CLI."""
    out = tmp_path_factory.mktemp("gsm8k")
    result = cli("prep", "--source", str(gsm8k_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `verl-p40 ARGS` as a user would (a separate process), capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", *args],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=REPO, timeout=600,
    )
