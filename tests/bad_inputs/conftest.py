"""The bad-input matrix's harness: the `world` every case runs in and the one check every case must pass (exit code 2,
or 3 where there is no GPU driver; exactly one line on stderr naming the file/row/variable/value and what to do; no
traceback; every file and folder that was there before as it was, and no new one: in the world, in the temporary
directory the command is given ($TMPDIR) and in the Hugging Face home it is given ($HF_HOME, not there before)). Each
test_matrix*.py file holds a CASES list of (name, argv, env, expected words) with "{tmp}" standing for the world
folder; test_matrix_size.py counts them all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, cli
from verl_p40.data import gsm8k as data

T = "{tmp}"  # replaced by the world folder in each case


FOLDER = b"<folder>"  # what a folder is in a snapshot (its key ends with "/")
TMP, HF_HOME = ".tmp", ".hf-home"  # in the world: the command's $TMPDIR, and its $HF_HOME (made by no case)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file (its bytes), folder (FOLDER, its key ending with "/") and link (where it points) under `root`: an
    empty folder left behind shows as much as a file."""
    out = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = b"-> " + os.fsencode(os.readlink(p))
        elif p.is_dir():
            out[key + "/"] = FOLDER
        else:
            out[key] = p.read_bytes()
    return out


def command_env(world: Path, env: dict[str, str]) -> dict[str, str]:
    """A case's environment: its own variables, and a temporary directory and Hugging Face home inside the world (so
    that what a command leaves there is seen), unless the case sets them itself."""
    (world / TMP).mkdir(exist_ok=True)
    given = {key: value.replace(T, str(world)) for key, value in env.items()}
    return {"TMPDIR": str(world / TMP), "HF_HOME": str(world / HF_HOME), **given}


@pytest.fixture()
def world(tmp_path, gsm8k_dir, tokenizer_dir):
    """A working folder with a small prepared dataset, a GSM8K source, a model folder without weights and a file."""
    src = tmp_path / "src"
    src.mkdir()
    for split in data.SPLITS:
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:8]
        (src / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    assert cli("prep", "--source", str(src), "--out", str(tmp_path / "prepared")).returncode == 0
    (tmp_path / "nomodel").mkdir()
    for name in ("config.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        (tmp_path / "nomodel" / name).write_bytes((tokenizer_dir / name).read_bytes())
    (tmp_path / "a-file").write_text("keep me")
    bad_utf8 = tmp_path / "badutf8"
    bad_utf8.mkdir()
    (bad_utf8 / "train.jsonl").write_bytes(b'{"question": "caf\xe9?", "answer": "#### 1"}\n')
    (bad_utf8 / "test.jsonl").write_bytes((src / "test.jsonl").read_bytes())
    nulls = tmp_path / "nulls"
    nulls.mkdir()
    table = pq.read_table(tmp_path / "prepared" / "test.parquet").to_pylist()[:3]
    for row in table:
        row["extra_info"] = None
    pq.write_table(pa.Table.from_pylist(table), nulls / "test.parquet")
    (tmp_path / "bad.csv").write_text("this,is\nnot,a gpu csv\n")
    from verl_p40.gpu.sampler import GPU_COLUMNS

    good = {c: "1" for c in GPU_COLUMNS} | {"name": "Tesla P40", "throttle_reasons": "none"}
    rows = [",".join(GPU_COLUMNS), ",".join(good[c] for c in GPU_COLUMNS)]
    rows.append(",".join("lots" if c == "memory_used_bytes" else good[c] for c in GPU_COLUMNS))
    (tmp_path / "gpu-bad-row.csv").write_text("\n".join(rows) + "\n")  # a gpu.csv edited by hand: its line 3
    return tmp_path


def entrypoint(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a compose service's entrypoint as its container does (`entrypoints/<service>.sh ARGS`, which execs the
    installed `verl-p40`), the environment standing for what compose passes from `.env`."""
    script, *rest = args
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the venv's verl-p40 console script
    return subprocess.run(
        ["sh", str(REPO / "entrypoints" / script), *rest],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {}), "PATH": path},
        cwd=REPO,
        timeout=600,
    )


NO_DRIVER_LINE = "no NVIDIA GPU visible through NVML"  # the line a command gives where there is no NVIDIA driver


def without_a_driver_where_asked(request, expected: str) -> None:
    """A case whose promised line is the no-driver one runs without a driver on any host (tests/conftest.py's
    `no_driver`); every other case sees the host's NVML as it is (none in CI's plain run, a P40 in its stand-in run)."""
    if NO_DRIVER_LINE in expected:
        request.getfixturevalue("no_driver")


def check_case(world: Path, args: list[str], env: dict[str, str], expected: str, run=cli) -> None:
    """Run one case (through the CLI, or `run=entrypoint`) and assert the promise."""
    env = command_env(world, env)
    before = snapshot(world)
    result = run(*[a.replace(T, str(world)) for a in args], env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    lines = [
        ln
        for ln in result.stderr.splitlines()
        if ln.strip() and not ln.startswith("[verl-p40]") and not ln.startswith(("PASS ", "FAIL ", "SKIP ", "doctor: "))
    ]
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("verl-p40") and expected in lines[0], lines[0]
    # exit 2 for usage and data errors; 3 only where the GPU driver is missing (and the line says so)
    assert result.returncode == (3 if "NVML" in lines[0] else 2), (result.returncode, lines[0])
    after = snapshot(world)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing there before was changed or removed
    assert sorted(set(after) - set(before)) == [], "a failed command left files or folders behind"
