"""Write files (or folders) under a temporary name and rename them when complete, so that no partial output is ever
seen. The one temp-then-rename helper of the package."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staged(targets: list[Path], directory: bool | list[bool] = False, mode: int | None = None) -> Iterator[list[Path]]:
    """Yield temporary paths beside `targets` (empty folders where `directory` says so: one flag for all, or one per
    target); rename all of them onto the targets only if the block succeeds. `mode`: the permissions to give (else the
    umask's, as open() and mkdir() would).

    On any exception every temporary path is removed and the targets are left as they were. A folder that is there
    already is replaced as a whole: moved aside, the new one renamed into its place, the old one removed (whoever
    calls this has made sure it may be replaced).
    """
    kinds = directory if isinstance(directory, list) else [directory] * len(targets)
    temps: list[Path] = []
    try:
        for target, is_dir in zip(targets, kinds):
            target.parent.mkdir(parents=True, exist_ok=True)
            prefix, where = f".{target.name}.", target.parent
            if is_dir:
                name = tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=where)
                default = 0o777
            else:
                fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=where)
                os.close(fd)
                default = 0o666
            # mkstemp/mkdtemp make 0600/0700 paths, and the rename would keep that: give the umask's permissions so
            # that another uid sharing the volume can read them
            os.chmod(name, mode if mode is not None else default & ~_umask())
            temps.append(Path(name))
        yield temps
        for temp, target in zip(list(temps), targets):
            _replace(temp, target, temps)
    finally:
        for temp in temps:
            if temp.is_dir() and not temp.is_symlink():
                shutil.rmtree(temp, ignore_errors=True)
            else:
                temp.unlink(missing_ok=True)


def _replace(temp: Path, target: Path, temps: list[Path]) -> None:
    if not (temp.is_dir() and target.is_dir() and not target.is_symlink()):
        os.replace(temp, target)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old.tmp", dir=target.parent))
    temps.append(aside)  # removed with what it holds once the new folder is in place
    os.replace(target, aside)
    try:
        os.replace(temp, target)
    except BaseException:
        os.replace(aside, target)
        raise


def write_text(path: Path, text: str, mode: int | None = None) -> None:
    with staged([path], mode=mode) as (temp,):
        temp.write_text(text, encoding="utf-8")


def write_whole(fd: int, data: bytes, start: int | None = None, before_undo: Callable[[], None] | None = None) -> None:
    """`data` written to the open file `fd` at `start` (its end by default), all of it or none: a write refused (a
    full disk) or interrupted (a signal) is taken back by cutting the file to where it began, and re-raised;
    `before_undo` runs first (to see the disk as the failed write left it)."""
    start = os.lseek(fd, 0, os.SEEK_END) if start is None else os.lseek(fd, start, os.SEEK_SET)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        if before_undo:
            before_undo()
        os.ftruncate(fd, start)
        raise
