"""Pieces for the lent GPU machine (bench/device/chunks.py is the command): a file or folder cut into chunks that
each fit one device call beside the checkout, checked and put back together there."""

from __future__ import annotations

import hashlib
import re
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


def chunk_mib(asked: int | None, repo: Path = REPO) -> int:
    """The chunk size to split with: `asked` when it travels beside the checkout now, else what does."""
    fits = fitting_mib(repo)
    if asked is None:
        return fits
    if not 1 <= asked <= fits:
        raise ChunkError(f"--chunk-mib {asked}: chunks of 1 to {fits} MiB travel beside the checkout now")
    return asked


def _folders(out: Path, name: str) -> list[Path]:
    """The chunk folders of `name` under `out` (.gpu-NAME-00, ... -99, -100, ...), in order."""
    pattern = re.compile(rf"\.gpu-{re.escape(name)}-(\d+)")
    found = [(int(m.group(1)), p) for p in out.iterdir() if (m := pattern.fullmatch(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def split(source: Path, out: Path, name: str, chunk_mib: int) -> list[Path]:
    """`source` (a file, or a folder as an uncompressed tar) cut into `out/.gpu-NAME-NN/cNN` folders, with the list of
    every chunk's sha256 (and what to put back, and its size) in the first. Earlier folders of that name are replaced
    only once the new ones are all written."""
    if chunk_mib < 1:
        raise ChunkError(f"--chunk-mib {chunk_mib}: a chunk is at least 1 MiB")
    with tempfile.TemporaryDirectory(prefix=".chunks-", dir=out) as work:
        whole = source
        if source.is_dir():
            whole = Path(work) / "folder.tar"
            with tarfile.open(whole, "w") as tar:
                tar.add(source, arcname=".")
        size, lines, made = chunk_mib << 20, [], []
        with open(whole, "rb") as handle:
            for index, block in enumerate(iter(lambda: handle.read(size), b"")):
                folder = Path(work) / f".gpu-{name}-{index:02d}"
                folder.mkdir()
                (folder / f"c{index:02d}").write_bytes(block)
                lines.append(f"{hashlib.sha256(block).hexdigest()}  c{index:02d}\n")
                made.append(folder)
        if not made:
            raise ChunkError(f"{source} is empty: nothing to split")
        kind = "folder" if source.is_dir() else "file"
        (made[0] / LISTING).write_text(f"# {kind} {source.name} {whole.stat().st_size}\n" + "".join(lines))
        for old in _folders(out, name):
            shutil.rmtree(old)
        return [folder.rename(out / folder.name) for folder in made]


def _listing(chunks: Path) -> tuple[str, int | None, list[tuple[str, str]]]:
    """What the list in `chunks` says: the kind (file or folder), the whole's size (None in a list written before
    sizes were), and each chunk's sha256 and name. A list without a header is an older pack's: a file."""
    listing = chunks / LISTING
    if not listing.is_file():
        raise ChunkError(f"{listing} missing: copy the first folder (.gpu-NAME-00 carries the list) with its chunk")
    kind, size, expected = "file", None, []
    for number, line in enumerate(listing.read_text().splitlines(), 1):
        words = line.split()
        if number == 1 and line.startswith("#"):
            sized = len(words) == 4 and words[3].isdigit()
            if words[1:2] not in (["file"], ["folder"]) or not (len(words) == 3 or sized):
                raise ChunkError(f"{listing}, line 1: {line!r} is not '# file|folder NAME BYTES': split again")
            kind, size = words[1], int(words[3]) if sized else None
        elif words:
            if len(words) != 2 or not re.fullmatch(r"[0-9a-f]{64}", words[0]) or not re.fullmatch(r"c\d+", words[1]):
                raise ChunkError(f"{listing}, line {number}: {line!r} is not 'SHA256  cNN': copy .gpu-NAME-00 again")
            expected.append((words[0], words[1]))
    if not expected:
        raise ChunkError(f"{listing} lists no chunk: copy .gpu-NAME-00 again")
    return kind, size, expected


def join(chunks: Path, out: Path, expect: str | None = None) -> str:
    """The chunks under `chunks` checked against their list and put back together at `out` (the file, or the
    folder); nothing is left at `out` unless every chunk is there and unchanged and the whole is put back. `expect`:
    the kind the caller needs (file or folder). Returns what was put back."""
    kind, size, expected = _listing(chunks)
    if expect and kind != expect:
        raise ChunkError(
            f"the chunks under {chunks} hold a {kind}, not a {expect}: made by an older split; split again"
        )
    missing = [name for _, name in expected if not (chunks / name).is_file()]
    if missing:
        raise ChunkError(
            f"{len(missing)} of {len(expected)} chunks missing under {chunks}: {', '.join(missing[:5])}"
            f" (copy each from its .gpu-NAME-NN folder)"
        )
    damaged = [name for digest, name in expected if sha256(chunks / name) != digest]
    if damaged:
        raise ChunkError(f"chunk {damaged[0]} under {chunks} is not what split wrote (sha256 differs): copy it again")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as work:
        whole = Path(work) / "whole"
        try:
            with open(whole, "wb") as handle:
                for _, name in expected:
                    with open(chunks / name, "rb") as part:
                        shutil.copyfileobj(part, handle)
            if size is not None and whole.stat().st_size != size:
                raise ChunkError(
                    f"the chunks under {chunks} make {whole.stat().st_size} bytes, not {size}: split again"
                )
            if kind == "folder":
                with tarfile.open(whole) as tar:
                    tar.extractall(Path(work) / "folder", filter="data")
                whole = Path(work) / "folder"
            if out.exists():
                raise ChunkError(f"{out} exists: remove it, or join somewhere else")
            whole.rename(out)  # whole, or not there at all
        except (OSError, tarfile.TarError) as error:
            raise ChunkError(f"putting {chunks} back together at {out} failed: {error}") from None
    return f"{len(expected)} chunks checked: {kind} {out}"
