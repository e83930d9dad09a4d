"""Write files under a temporary name and rename them when complete, so that no partial output is ever seen."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staged(targets: list[Path]) -> Iterator[list[Path]]:
    """Yield temporary paths beside `targets`; rename all of them onto the targets only if the block succeeds.

    On any exception every temporary file is removed and the targets are left as they were.
    """
    temps: list[Path] = []
    try:
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            # mkstemp makes 0600 files, and the rename would keep that: give the file the umask's permissions, as
            # open() would, so that another uid sharing the volume can read it
            os.chmod(name, 0o666 & ~_umask())
            temps.append(Path(name))
        yield temps
        for temp, target in zip(temps, targets):
            os.replace(temp, target)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with staged([path]) as (temp,):
        temp.write_text(text, encoding="utf-8")
