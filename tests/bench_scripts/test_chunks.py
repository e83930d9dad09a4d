"""Pieces for the GPU machine (bench/device/chunks.py): a file or folder cut into chunks that each fit one device call
beside the checkout, put back together there only when every chunk is there and unchanged."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "device" / "chunks.py"
sys.path.insert(0, str(REPO / "bench"))

from lib import chunks  # noqa: E402


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def _copied(tmp_path: Path, name: str) -> Path:
    """The chunks as the device calls leave them: each folder's files copied into one folder."""
    into = tmp_path / "machine" / name
    into.mkdir(parents=True)
    for folder in sorted(tmp_path.glob(f".gpu-{name}-*")):
        for f in folder.iterdir():
            (into / f.name).write_bytes(f.read_bytes())
    return into


def test_a_file_goes_in_chunks_and_comes_back_whole_only_when_every_chunk_is_right(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom((5 << 19) + 7))  # 2.5 MiB and 7 bytes: three chunks of 1 MiB
    (tmp_path / ".gpu-model-07").mkdir()  # an earlier split's folder: replaced
    made = _run("split", str(source), "--name", "model", "--chunk-mib", "1", "--out", str(tmp_path))
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in tmp_path.glob(".gpu-model-*")) == [".gpu-model-00", ".gpu-model-01", ".gpu-model-02"]
    assert all(f.stat().st_size <= 1 << 20 for f in tmp_path.glob(".gpu-model-*/c*"))
    there, out = _copied(tmp_path, "model"), tmp_path / "machine" / "model.gguf"

    original = (there / "c01").read_bytes()
    (there / "c01").write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    damaged = _run("join", "--chunks", str(there), "--out", str(out))
    assert damaged.returncode == 2 and "Traceback" not in damaged.stderr
    assert damaged.stderr.strip() == (
        f"chunks join: error: chunk c01 under {there} is not what split wrote (sha256 differs): copy it again"
    )
    (there / "c01").unlink()
    missing = _run("join", "--chunks", str(there), "--out", str(out))
    assert missing.returncode == 2 and "1 of 3 chunks missing" in missing.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["model"]  # nothing written, not even a part

    (there / "c01").write_bytes(original)
    joined = _run("join", "--chunks", str(there), "--out", str(out))
    assert joined.returncode == 0, joined.stderr
    assert out.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in out.parent.iterdir()) == ["model", "model.gguf"]


def test_a_folder_travels_as_a_tar_and_comes_back_as_the_folder(tmp_path):
    bundle = tmp_path / ".gpu-bundle"
    (bundle / "whl").mkdir(parents=True)
    (bundle / "install.sh").write_text("#!/usr/bin/env bash\necho installed\n")
    (bundle / "whl" / "a-1.0-py3-none-any.whl").write_bytes(os.urandom(3 << 19))
    chunks.split(bundle, tmp_path, "bundle", 1)
    assert len(list(tmp_path.glob(".gpu-bundle-*"))) == 2
    out = tmp_path / "machine" / "bundle"
    assert chunks.join(_copied(tmp_path, "bundle"), out) == f"2 chunks checked: folder {out}"
    assert (out / "install.sh").read_text() == (bundle / "install.sh").read_text()
    wheel = Path("whl") / "a-1.0-py3-none-any.whl"
    assert (out / wheel).read_bytes() == (bundle / wheel).read_bytes()
    assert sorted(p.name for p in out.parent.iterdir()) == ["bundle"]  # the tar on the way is gone


def test_the_chunk_size_is_what_fits_beside_what_the_checkout_carries(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/.gpu-*/\n")
    (tmp_path / "tracked.bin").write_bytes(b"\0" * (10 << 20))
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    (tmp_path / ".gpu-model-00").mkdir()
    (tmp_path / ".gpu-model-00" / "c00").write_bytes(b"\0" * (30 << 20))  # ignored: travels only when carried
    tracked = 10 << 20
    assert chunks.travelling_bytes(tmp_path) == tracked + len("/.gpu-*/\n")
    assert chunks.fitting_mib(tmp_path) == 64 - 10 - chunks.MARGIN_MIB - 1  # whole MiB, rounded down
    (tmp_path / "new-result.json").write_bytes(b"\0" * (2 << 20))  # untracked, not ignored: it travels
    assert chunks.fitting_mib(tmp_path) == 64 - 12 - chunks.MARGIN_MIB - 1
    fits = _run("fits", cwd=tmp_path)
    assert fits.returncode == 0 and fits.stdout.strip() == str(chunks.fitting_mib(REPO))  # the script's own checkout
