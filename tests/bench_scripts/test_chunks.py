"""Pieces for the GPU machine (bench/device/chunks.py): a file or folder cut into chunks that each fit one device call
beside the checkout, put back together there only when every chunk is there and unchanged."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    out = tmp_path / "machine" / "bundle-joined"
    assert chunks.join(_copied(tmp_path, "bundle"), out, expect="folder") == f"2 chunks checked: folder {out}"
    assert (out / "install.sh").read_text() == (bundle / "install.sh").read_text()
    wheel = Path("whl") / "a-1.0-py3-none-any.whl"
    assert (out / wheel).read_bytes() == (bundle / wheel).read_bytes()
    assert sorted(p.name for p in out.parent.iterdir()) == ["bundle", "bundle-joined"]  # the tar on the way is gone


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


def test_a_list_that_does_not_add_up_or_a_folder_that_cannot_be_put_back_leaves_nothing(tmp_path):
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(3 << 19))
    chunks.split(source, tmp_path, "big", 1)
    there, out = _copied(tmp_path, "big"), tmp_path / "machine" / "big.bin"
    listing = (there / chunks.LISTING).read_text().splitlines()
    assert listing[0] == f"# file big.bin {3 << 19}" and len(listing) == 3

    (there / chunks.LISTING).write_text("\n".join(listing[:-1]) + "\n")  # the last chunk's line lost
    short = _run("join", "--chunks", str(there), "--out", str(out))
    assert short.returncode == 2 and short.stderr.strip() == (
        f"chunks join: error: the chunks under {there} make {1 << 20} bytes, not {3 << 19}: split again"
    )
    (there / chunks.LISTING).write_text("#\n" + "\n".join(listing[1:]) + "\n")
    header = _run("join", "--chunks", str(there), "--out", str(out))
    assert header.returncode == 2 and "line 1: '#' is not '# file|folder NAME BYTES'" in header.stderr
    assert "Traceback" not in short.stderr + header.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["big"]

    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "escape").symlink_to("/etc/passwd")  # an absolute link: the data filter refuses to extract it
    chunks.split(folder, tmp_path, "linked", 1)
    refused = _run("join", "--chunks", str(_copied(tmp_path, "linked")), "--out", str(tmp_path / "machine" / "out"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("chunks join: error: putting ") and " failed: " in refused.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["big", "linked"]  # no half-extracted folder, no part


def test_an_older_list_without_a_header_is_a_file_and_a_folder_is_asked_for_by_kind(tmp_path):
    there = tmp_path / "old"
    there.mkdir()
    block = os.urandom(1000)
    (there / "c00").write_bytes(block)
    (there / chunks.LISTING).write_text(f"{chunks.sha256(there / 'c00')}  c00\n")  # as the first pack wrote it
    with pytest.raises(chunks.ChunkError, match="hold a file, not a folder: made by an older split; split again"):
        chunks.join(there, tmp_path / "wheels", expect="folder")
    assert not (tmp_path / "wheels").exists()
    assert chunks.join(there, tmp_path / "whole.bin") == f"1 chunks checked: file {tmp_path / 'whole.bin'}"
    assert (tmp_path / "whole.bin").read_bytes() == block


def test_a_split_replaces_the_old_folders_only_once_it_has_made_the_new_ones(tmp_path):
    source = tmp_path / "data.bin"
    source.write_bytes(os.urandom(5 << 18))  # 1.25 MiB: two chunks of 1 MiB
    for stale in (".gpu-data-00", ".gpu-data-100"):  # an earlier split's, a three-digit one among them
        (tmp_path / stale).mkdir()
    (tmp_path / ".gpu-database-00").mkdir()  # another name's: kept
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    refused = _run("split", str(empty), "--name", "data", "--chunk-mib", "1", "--out", str(tmp_path))
    assert (
        refused.returncode == 2 and refused.stderr.strip() == f"chunks split: error: {empty} is empty: nothing to split"
    )
    assert (tmp_path / ".gpu-data-100").is_dir()  # nothing replaced by a split that made nothing
    for size in ("0", "-1", "100000"):
        wrong = _run("split", str(source), "--name", "data", "--chunk-mib", size, "--out", str(tmp_path))
        assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
        assert wrong.stderr.startswith(f"chunks split: error: --chunk-mib {size}: chunks of 1 to ")
    chunks.split(source, tmp_path, "data", 1)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert names == [".gpu-data-00", ".gpu-data-01", ".gpu-database-00"]
    assert (tmp_path / ".gpu-data-00" / "c00").read_bytes() == source.read_bytes()[: 1 << 20]
