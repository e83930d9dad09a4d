"""Shared test fixtures. Tests run offline, on the data committed in tests/fixtures (a clone needs nothing else)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_model import make_tiny_qwen  # noqa: F401 (the tests import it from here)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

# A module whose tests start Ray sets `pytestmark = ONE_RAY`: the `ray stop --force` each such module ends with kills
# every Ray process of this machine, so these tests run one at a time, on one pytest-xdist worker, while the rest of
# the suite is spread over the others (`-n 2 --dist loadgroup`, as .ci/run runs it; without xdist the mark does
# nothing).
ONE_RAY = pytest.mark.xdist_group("ray")


def _fixture(sub: str) -> Path:
    """A folder of tests/fixtures, its data files checked against SHA256SUMS (a checkout that rewrote line endings
    or cut a file short would otherwise fail somewhere far from the cause)."""
    folder = FIXTURES / sub
    for line in (FIXTURES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        if not name.startswith(f"{sub}/"):
            continue
        path = FIXTURES / name
        if not path.is_file():
            pytest.fail(f"test data missing: {path} (committed in tests/fixtures; restore it: git checkout -- {path})")
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            pytest.fail(f"test data changed: {path} differs from tests/fixtures/SHA256SUMS (git checkout -- {path})")
    return folder


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    return _fixture("gsm8k")


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return _fixture("qwen2.5-0.5b-instruct")


@pytest.fixture(scope="session")
def prepared(gsm8k_dir, tmp_path_factory) -> Path:
    """The full GSM8K converted once per session by the real CLI, every split whole (no validation slice: the tests
    that read it count the source's rows; tests/unit_data/test_prep_safety.py covers the slice prep writes by
    default)."""
    out = tmp_path_factory.mktemp("gsm8k")
    result = cli("prep", "--source", str(gsm8k_dir), "--out", str(out), "--val-size", "0")
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def tiny_model(tokenizer_dir, tmp_path_factory) -> Path:
    """A complete (tiny, random) Qwen2 model folder: what --dry-run and the preflight want to see."""
    return make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp("tiny-model"))


def run_args(model: Path, data: Path, folder: Path, *, checkpoints: bool = True, logs: bool = True) -> list[str]:
    """A P40 run's options as train, bench, doctor and cluster head take them: the profile, a model, its data, and
    checkpoints and logs under `folder` (each left out where False)."""
    args = ["--profile", "p40", "--model", str(model), "--data", str(data)]
    args += ["--checkpoints", str(folder / "ckpt")] if checkpoints else []
    return [*args, "--logs", str(folder / "logs")] if logs else args


NVML_STANDINS = REPO / "tests" / "nvml"  # p40/: NVML on a P40 host; no_driver/: NVML where no driver is installed


def _nvml_standin(monkeypatch, name: str):
    """NVML's Python binding replaced by tests/nvml/NAME/pynvml.py in this process and, through PYTHONPATH, in every
    `verl-p40` the test starts; the module, for a test that counts what is read through it."""
    import importlib.util

    from verl_p40.gpu import nvml

    shim = NVML_STANDINS / name
    spec = importlib.util.spec_from_file_location("pynvml", shim / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(nvml, "_initialized", False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])))
    return module


@pytest.fixture
def no_driver(monkeypatch):
    """This machine without an NVIDIA driver, whatever it has: the tests about "no GPU" pass on a GPU host too (its
    nvmlInit fails as the real one does without libnvidia-ml)."""
    _nvml_standin(monkeypatch, "no_driver")
    return NVML_STANDINS / "no_driver"


@pytest.fixture
def p40_host(monkeypatch):
    """This machine as a P40 host's NVML reports it (tests/nvml/p40), whatever it has; the stand-in pynvml module."""
    return _nvml_standin(monkeypatch, "p40")


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `verl-p40 ARGS` as a user would (a separate process), capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=REPO,
        timeout=600,
    )


@pytest.fixture(scope="session")
def verl_source() -> Path:
    """verl 0.5.0 as published: the copy tests/run.sh installed (`pip install --no-deps verl==0.5.0`), unpatched.
    Tests patch copies of it, never this one."""
    from verl_p40 import patches

    root = patches.default_verl_dir()
    assert patches.verl_version(root) == "0.5.0", f"{root}: tests/run.sh installs verl 0.5.0"
    applied = [name for name, state in patches.status(root).items() if state == patches.APPLIED]
    assert not applied, f"{root}: the installed verl is patched ({applied[0]}...); reinstall it with tests/run.sh"
    return root


@pytest.fixture(scope="session")
def patched_verl(verl_source, tmp_path_factory) -> Path:
    """A folder to put first on PYTHONPATH: verl 0.5.0 with the verl-p40 patch set applied by the CLI."""
    root = tmp_path_factory.mktemp("patched")
    shutil.copytree(verl_source, root / "verl")
    result = cli("patch-verl", str(root / "verl"))
    assert result.returncode == 0, result.stderr
    return root


def run_verl_probe(script: str, patched_verl: Path, folder: Path, *args: str) -> dict:
    """Run tests/SCRIPT CONFIG_YAML ARGS on the patched verl with the CPU shims (one gloo process group of one, on a
    free port) and return the JSON of its last line; CONFIG_YAML is `verl-p40 config --profile p40 --algorithm ppo`
    (the critic's passes too)."""
    import json
    import socket

    config = cli("config", "--profile", "p40", "--algorithm", "ppo")
    assert config.returncode == 0, config.stderr
    (folder / "config.yaml").write_text(config.stdout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": f"{tests / 'cpu_shims'}{os.pathsep}{patched_verl}",
        "VERL_P40_CPU_SHIMS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRIM_PROBE_PORT": str(port),
    }
    command = [sys.executable, str(tests / script), str(folder / "config.yaml"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


_TWO_RANKS = """
import importlib.util, json, os, sys
import torch.distributed as dist
import torch.multiprocessing as mp

def rank(r, path, port, out):
    spec = importlib.util.spec_from_file_location("module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=r, world_size=2)
    with open(f"{out}.{r}", "w") as handle:
        json.dump(body(r, module), handle)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(rank, args=tuple(sys.argv[1:]), nprocs=2)
"""


def run_two_ranks(folder: Path, body: str, module: Path) -> list:
    """Run `body` (Python defining body(rank, module) -> JSON-able, where module is the file `module` loaded) on the
    2 processes of a gloo group on a free port, and return what each rank's body returned."""
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    path, out = folder / "two_ranks.py", folder / "ranks"
    path.write_text(body + _TWO_RANKS)
    result = subprocess.run([sys.executable, str(path), str(module), port, str(out)], capture_output=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads((folder / f"ranks.{r}").read_text()) for r in (0, 1)]
