"""Write files (or folders) under a temporary name and rename them when complete, so that no partial output is ever
seen. The one temp-then-rename helper of the package."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staged(targets: list[Path], directory: bool = False, mode: int | None = None) -> Iterator[list[Path]]:
    """Yield temporary paths beside `targets` (empty folders with `directory`); rename all of them onto the targets
    only if the block succeeds. `mode`: the permissions to give (else the umask's, as open() and mkdir() would).

    On any exception every temporary path is removed and the targets are left as they were.
    """
    temps: list[Path] = []
    try:
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            prefix, where = f".{target.name}.", target.parent
            if directory:
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
        for temp, target in zip(temps, targets):
            os.replace(temp, target)
    finally:
        for temp in temps:
            if temp.is_dir():
                shutil.rmtree(temp, ignore_errors=True)
            else:
                temp.unlink(missing_ok=True)


def write_text(path: Path, text: str, mode: int | None = None) -> None:
    with staged([path], mode=mode) as (temp,):
        temp.write_text(text, encoding="utf-8")
