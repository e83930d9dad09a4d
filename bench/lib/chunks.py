"""Pieces for the lent GPU machine (bench/device/chunks.py is the command): a file or folder cut into chunks that
each fit one device call beside the checkout, checked and put back together there."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CALL_MIB = 64  # what one device call may carry, the checkout included
MARGIN_MIB = 4  # for results committed after the chunks were made
LISTING = "CHUNKS.sha256"


class ChunkError(Exception):
    """A chunk missing or damaged, or a size that cannot fit: the message names it and what to do."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def travelling_bytes(repo: Path = REPO) -> int:
    """The bytes every device call carries from the checkout: its tracked files and its untracked files that git
    does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    files = {repo / name for name in listed.decode().split("\0") if name}
    return sum(path.stat().st_size for path in files if path.is_file() and not path.is_symlink())


def fitting_mib(repo: Path = REPO) -> int:
    """The largest whole MiB a chunk may be so that it travels beside the checkout, with the margin kept."""
    mib = (CALL_MIB << 20) - travelling_bytes(repo) - (MARGIN_MIB << 20)
    if mib < 1 << 20:
        raise ChunkError(f"the checkout carries {travelling_bytes(repo) / 2**20:.1f} MiB: no chunk fits beside it")
    return mib >> 20


def split(source: Path, out: Path, name: str, chunk_mib: int) -> list[Path]:
    """`source` (a file, or a folder as an uncompressed tar) cut into `out/.gpu-NAME-NN/cNN` folders, replacing any
    earlier ones of that name, with the list of every chunk's sha256 (and what to put back) in the first."""
    for old in out.glob(f".gpu-{name}-[0-9][0-9]"):
        shutil.rmtree(old)
    with tempfile.TemporaryDirectory(prefix="chunks-") as work:
        whole = source
        if source.is_dir():
            whole = Path(work) / "folder.tar"
            with tarfile.open(whole, "w") as tar:
                tar.add(source, arcname=".")
        size, lines, folders = chunk_mib << 20, [], []
        with open(whole, "rb") as handle:
            for index, block in enumerate(iter(lambda: handle.read(size), b"")):
                folder = out / f".gpu-{name}-{index:02d}"
                folder.mkdir(parents=True)
                (folder / f"c{index:02d}").write_bytes(block)
                lines.append(f"{hashlib.sha256(block).hexdigest()}  c{index:02d}\n")
                folders.append(folder)
    if not folders:
        raise ChunkError(f"{source} is empty: nothing to split")
    kind = "folder" if source.is_dir() else "file"
    (folders[0] / LISTING).write_text(f"# {kind} {source.name}\n" + "".join(lines))
    return folders


def join(chunks: Path, out: Path) -> str:
    """The chunks under `chunks` checked against their list and put back together at `out` (the file, or the
    folder's contents); nothing is written when one is missing or damaged. Returns what was put back."""
    listing = chunks / LISTING
    if not listing.is_file():
        raise ChunkError(f"{listing} missing: copy the first folder (.gpu-NAME-00 carries the list) with its chunk")
    lines = listing.read_text().splitlines()
    kind = lines[0].split()[1] if lines and lines[0].startswith("#") else "file"
    expected = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    missing = [name for _, name in expected if not (chunks / name).is_file()]
    if missing:
        raise ChunkError(f"{len(missing)} of {len(expected)} chunks missing under {chunks}: {', '.join(missing[:5])}")
    damaged = [name for digest, name in expected if sha256(chunks / name) != digest]
    if damaged:
        raise ChunkError(f"chunk {damaged[0]} under {chunks} is not what split wrote (sha256 differs): copy it again")
    partial = out.with_name(out.name + (".part" if kind == "file" else ".tar.part"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "wb") as handle:
        for _, name in expected:
            with open(chunks / name, "rb") as part:
                shutil.copyfileobj(part, handle)
    if kind == "file":
        partial.replace(out)  # whole, or not there at all
    else:
        with tarfile.open(partial) as tar:
            tar.extractall(out, filter="data")
        partial.unlink()
    return f"{len(expected)} chunks checked: {kind} {out}"
