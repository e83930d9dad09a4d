"""A command's output folder: it writes only inside it, never through a symbolic link, never over (or removes) a file
it did not write there itself, and each output appears whole or not at all (`verl_p40.atomic`: a temporary name in
the same folder, renamed at the end, removed on any failure, Ctrl-C and SIGTERM included).

How a command knows a file is its own: the folder's ledger, `.verl-p40-outputs.json`, records every output it wrote
there (for a folder, every file in it). A path that is there is replaced only when the ledger lists it (or `adopt`
recognises it: what an earlier version wrote, or what a command records in a manifest of its own), and a folder only
when every file in it is one the command wrote; a user's file of an output's name, or one a user put into an output
folder, stops the command with one line naming it. A full disk, a read-only folder or a file where the folder belongs
ends in one line too, and a write that fails leaves no folder it made (`made`); nor does a command that fails leave the
caches libraries make in the temporary directory as they are imported (`Temporaries`, from the CLI).

A file that grows while the command runs (the monitor's CSV) is appended to in whole lines instead (`append`): each
addition lands whole or not at all, and a last line a killed run cut short is dropped before the next; a file of its
own is moved onto another of its names (rotated) with `rename`, the ledger following.

A folder has one writer at a time (`writer`): a command that writes it holds an exclusive flock on the folder itself
from its first check to its last rename, and every `write` and cleanup of temporaries holds it too; a second command
into the same folder is refused in one line naming the folder and the process writing it (from the kernel's table of
locks), so that neither removes the other's temporaries nor renames its half onto the other's. Nothing is written for
it (a full disk locks as well as any), and the kernel drops it when its holder dies (a SIGKILL included). The
monitor's CSVs, which the gpu-monitor service and `monitor --once` add to at once, are locked per file instead
(`append`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import glob
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from verl_p40 import UserError, state_files
from verl_p40.atomic import staged, write_text, write_whole

LEDGER = ".verl-p40-outputs.json"
_writers: dict[str, list[int]] = {}  # folder -> [the descriptor holding its writer's lock, how many blocks hold it]
# What a library written in another language reports when the operating system refused a write (safetensors' Rust,
# pyarrow's C++): its text holds the system's own words
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG)


def os_reason(exc: BaseException) -> str | None:
    """Why the operating system refused a write, from the error a library raised; None when it is not such an error."""
    if isinstance(exc, UserError) or not isinstance(exc, Exception):
        return None
    text = str(exc)
    known = next((os.strerror(code) for code in WRITE_ERRORS if os.strerror(code) in text), None)
    if known or not isinstance(exc, OSError):
        return known
    return exc.strerror or (text.splitlines() or [type(exc).__name__])[0]


def contents(path: Path) -> list[str] | None:
    """The files under the folder `path`, relative to it (links as links, never followed); None for a file."""
    if not os.path.isdir(path) or os.path.islink(path):
        return None
    out = []
    for root, dirs, files in os.walk(path):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        out += [os.path.relpath(os.path.join(root, name), path) for name in files + links]
    return sorted(out)


class OutputFolder:
    """The folder `flag` names, into which `verl-p40 command` writes. `adopt(name, path)`: whether an existing path
    not in the ledger is the command's own all the same."""

    def __init__(self, folder: Path, flag: str, command: str, adopt: Callable[[str, Path], bool] | None = None) -> None:
        self.folder, self.flag, self.command, self.adopt = Path(folder), flag, command, adopt
        self._was_full = False  # whether the disk was full when a write failed, before its temporaries went

    def __str__(self) -> str:
        return f"{self.flag} {self.folder}"

    # ------------------------------------------------------------------------------------------ checks

    def check(self, names: Iterable[str] = ()) -> None:
        """Before any work: the folder can be written (no file in its place or above it, not read-only), and each of
        `names` is free or the command's own. Raises UserError naming what is in the way."""
        existing = self.folder
        while not os.path.lexists(existing) and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            what = "is a file, not a folder" if existing.is_file() else "is not a folder"
            raise UserError(f"{self}: {what}" if existing == self.folder else f"{self}: {existing} {what}")
        if not os.access(existing, os.W_OK | os.X_OK):
            if os.statvfs(existing).f_flag & os.ST_RDONLY:
                raise UserError(f"{self}: cannot write there ({existing} is on a read-only file system)")
            raise UserError(f"{self}: cannot write there (uid {os.getuid()} has no write permission in {existing})")
        for name in [*names, LEDGER]:
            problem = self.refusal(name)
            if problem:
                raise UserError(problem)

    def refusal(self, name: str) -> str | None:
        """Why `name` may not be written over, or None."""
        path = self.folder / name
        if path.is_symlink():
            return (
                f"{path}: a symbolic link; verl-p40 {self.command} writes only inside {self} and never through a "
                f"link: remove the link, or choose another {self.flag}"
            )
        if name == LEDGER or not path.exists():
            return None
        entry = self._ledger().get(name)
        if entry and entry.get("kind") == ("folder" if path.is_dir() else "file"):
            foreign = sorted(set(contents(path) or []) - set(entry.get("files") or []))
            if not foreign:
                return None
            return (
                f"{path / foreign[0]}: not written by verl-p40 {entry.get('by', self.command)}"
                + (f" (nor {len(foreign) - 1} more files there)" if len(foreign) > 1 else "")
                + f", and {path.name} would be replaced; move it away, or choose another {self.flag}"
            )
        if self.adopt and self.adopt(name, path):
            return None
        return (
            f"{path}: already there and not written by verl-p40 {self.command}; move it away (or remove it), or "
            f"choose another {self.flag}"
        )

    def owns(self, name: str) -> bool:
        return os.path.lexists(self.folder / name) and self.refusal(name) is None

    @contextlib.contextmanager
    def writer(self) -> Iterator[None]:
        """This process the folder's one writer for the block (blocks inside it nest): refused in one line when another
        live process writes it. A folder no one can write (read-only) has no writer to wait for: the write itself says
        so."""
        key = os.path.realpath(self.folder)
        if key in _writers:
            _writers[key][1] += 1
            try:
                yield
            finally:
                _writers[key][1] -= 1
            return
        if self.folder.is_dir() and not os.access(self.folder, os.W_OK | os.X_OK):
            yield  # the write itself (if any) says where and why it cannot be written
            return
        self.check()  # a file where the folder belongs: said before anything is made
        missing = [p for p in [self.folder, *self.folder.parents] if not os.path.lexists(p)]  # the deepest first
        with made(self.folder):
            fd = self._take_lock()
            _writers[key] = [fd, 1]
            try:
                yield
            finally:
                del _writers[key]
                os.close(fd)  # the lock goes with the descriptor
        for folder in missing:  # a folder made only for the lock goes with it
            with contextlib.suppress(OSError):
                os.rmdir(folder)

    def _take_lock(self) -> int:
        """An exclusive flock on the folder itself (nothing written: a full disk takes it as well as any), or the one
        line naming the process that holds it. A file system without flock on folders (some NFS) goes unlocked."""
        with self.reasons("open the folder"):
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(fd)
            os.close(fd)
            raise UserError(
                f"{self}: {holder} is writing into this folder; wait for it to end, or choose another {self.flag}"
            ) from None
        except OSError:
            pass  # no flock here: as before there was one
        return fd

    def _ledger(self) -> dict:
        """What the ledger lists, read whole: a damaged one is the one line naming it (read as empty, every output it
        listed would be taken for a user's, and the next write would drop them from it)."""
        fix = (
            "it lists the files verl-p40 wrote in this folder: move it away (what it listed is then kept as a "
            f"user's), or choose another {self.flag}"
        )
        found = state_files.load_json(self.folder / LEDGER, fix) or {}
        outputs = found.get("outputs", {})
        entries = outputs.values() if isinstance(outputs, dict) else [None]
        if not all(isinstance(e, dict) and isinstance(e.get("files", []), list) for e in entries):
            raise UserError(f"{self.folder / LEDGER}: not a ledger verl-p40 writes; {fix}")
        return outputs

    # ------------------------------------------------------------------------------------------ writing

    @contextlib.contextmanager
    def write(self, names: list[str], directory: bool | list[bool] = False) -> Iterator[list[Path]]:
        """Temporary paths for `names` (folders where `directory` says so), renamed onto them when the block ends
        well and recorded in the ledger; on any failure nothing of them is left, and what was there stays."""
        self.check(names)
        with self.writer():
            self.remove_stale_temps(names)
            with self._written(names, directory) as temps:
                yield temps

    @contextlib.contextmanager
    def _written(self, names: list[str], directory: bool | list[bool]) -> Iterator[list[Path]]:
        with self.reasons("write " + ", ".join(names)), made(self.folder):
            with staged([self.folder / name for name in names], directory) as temps:
                try:
                    yield temps
                except BaseException:
                    self._was_full = self._full()  # seen before the temporaries are removed
                    raise
                self._record(dict(zip(names, temps)))

    @contextlib.contextmanager
    def reasons(self, what: str) -> Iterator[None]:
        """A refused write inside the block (disk full, read-only) as the one line naming the folder."""
        self._was_full = False
        try:
            yield
        except BaseException as exc:
            reason = os_reason(exc)
            if reason is None:
                raise
            if reason not in map(os.strerror, WRITE_ERRORS) and (self._was_full or self._full()):
                reason = os.strerror(errno.ENOSPC)  # a short write (numpy's "N requested and M written") on a full disk
            raise UserError(f"{self}: cannot {what} ({reason})") from None

    def _full(self) -> bool:
        try:
            return os.statvfs(self.folder).f_bavail == 0
        except OSError:
            return False

    def _record(self, written: dict[str, Path]) -> None:
        """The ledger, before the renames: each name with the files it will hold, and those it holds now when they are
        the command's own (so that a stop between the renames leaves each path the command's, old or new)."""
        ledger = self._ledger()
        for name, temp in written.items():
            files = contents(temp)
            if files is not None and self.owns(name):
                files = sorted(set(files) | set(contents(self.folder / name) or []))
            ledger[name] = {"by": self.command, "kind": "file" if files is None else "folder", "files": files or []}
        self._save(ledger)

    def _save(self, ledger: dict) -> None:
        write_text(self.folder / LEDGER, json.dumps({"outputs": ledger}, indent=1) + "\n")

    @contextlib.contextmanager
    def append(self, name: str) -> Iterator[Callable[[bytes], None]]:
        """`name`, a file of lines, opened to add to: each `add(data)` (whole lines) lands whole or not at all (a
        refused or interrupted write is taken back out), and a last line a killed run cut short is dropped first.
        Refused as `write` refuses (a user's file, a link: never followed); a new file is in the ledger before it is
        there, so that a stop between the two leaves nothing the next run would refuse."""
        self.check([name])
        path = self.folder / name
        with self.reasons(f"write {name}"):
            self.folder.mkdir(parents=True, exist_ok=True)
            if self._ledger().get(name, {}).get("kind") != "file":
                self._record({name: path})
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)  # the umask applies
        try:
            with self.reasons(f"write {name}"), _locked(fd):
                _cut_to_whole_lines(fd)
            yield lambda data: self._add(fd, name, data)
        finally:
            os.close(fd)

    def _add(self, fd: int, name: str, data: bytes) -> None:
        # locked: another writer of the same file (the gpu-monitor service and a `monitor --once` into /logs/gpu)
        # never lands between this batch's start and its end, nor is cut off when this one is taken back
        with self.reasons(f"write {name}"), _locked(fd):
            write_whole(fd, data, before_undo=self._note_full)

    def _note_full(self) -> None:
        self._was_full = self._full()  # seen before the failed write is taken back

    def rename(self, name: str, new: str) -> None:
        """Move its own file `name` onto `new` (free, or its own: replaced), the ledger following (a rotated log)."""
        for each in (name, new):
            problem = self.refusal(each)
            if problem:
                raise UserError(problem)
        with self.reasons(f"rename {name} to {new}"):
            self._record({new: self.folder / name})  # before the rename: a stop between leaves both names its own
            os.replace(self.folder / name, self.folder / new)
            ledger = self._ledger()
            ledger.pop(name, None)
            self._save(ledger)

    def remove(self, name: str) -> bool:
        """Remove `name` when it is the command's own (checked first, with `check`); whether there was one."""
        path = self.folder / name
        if not os.path.lexists(path):
            return False
        problem = self.refusal(name)
        if problem:
            raise UserError(problem)
        with self.reasons(f"remove {name}"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            ledger = self._ledger()
            if ledger.pop(name, None) is not None:
                self._save(ledger)
        return True

    def remove_stale_temps(self, names: Iterable[str]) -> list[Path]:
        """The temporary paths of `names` (and of the ledger) a killed run left (`.NAME.*.tmp`): nothing trusts them;
        removed, as the folder's one writer (never those of a live writer: that one is named instead)."""
        if not self.folder.is_dir() or not any(self.folder.glob(".*.tmp")):
            return []
        with self.writer():
            return self._remove_stale_temps(names)

    def _remove_stale_temps(self, names: Iterable[str]) -> list[Path]:
        found = [self.folder.glob(f".{glob.escape(name)}.*.tmp") for name in [*names, LEDGER]]
        stale = [p for paths in found for p in paths] if self.folder.is_dir() else []
        for path in stale:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()
        return stale


COMMANDS = ("prep", "export", "eval", "fetch-model", "monitor", "bench")  # those that write output folders


def lock_holder(fd: int) -> str:
    """Who holds the flock on the open file `fd`, from the kernel's table of locks: `verl-p40 COMMAND (pid N)`, or
    the pid alone (a process in another container: pid 0 here)."""
    stat = os.fstat(fd)
    key = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            pids = [f[4] for f in (line.split() for line in table) if len(f) > 5 and f[1] == "FLOCK" and f[5] == key]
    except OSError:
        pids = []
    pid = next((p for p in pids if p.isdigit() and p != "0"), None)
    if pid is None:
        return "another process (in another container, or not visible from here)"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().decode("utf-8", "replace").split("\0")
    except OSError:
        argv = []
    command = next((argv[i:] for i, arg in enumerate(argv) if arg in COMMANDS), None)
    said = "verl-p40 " + " ".join(command[:1]) if command else " ".join(argv)[:80].strip() or "a process"
    return f"{said} (pid {pid})"


@contextlib.contextmanager
def made(folder: Path, keep: bool = True) -> Iterator[None]:
    """`folder` made for the block, with the folders above it that are not there; when the block fails (or after it,
    with `keep=False`: a check that only tries), those it made are removed again where nothing is in them, so that a
    failed command leaves no empty folder behind."""
    missing, path = [], Path(folder)
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)  # the deepest first
        path = path.parent
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        yield
    except BaseException:
        remove_empty(missing)
        raise
    if not keep:
        remove_empty(missing)


def remove_empty(folders: Iterable[Path]) -> None:
    """Each of `folders` (and the folders in it) removed where it holds nothing else, the deepest first; never a
    file, never through a link."""
    for folder in folders:
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        for root, dirs, _ in os.walk(folder, topdown=False):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, name))  # a link, or a folder with something in it, stays
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def library_caches() -> list[Path]:
    """What libraries make in the temporary directory as they are imported, whatever the command does: torch's
    compiler cache (`import torch._dynamo`, which transformers and verl do, makes $TMPDIR/torchinductor_$USER unless
    $TORCHINDUCTOR_CACHE_DIR names another place)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return []  # the user's own place: theirs to keep
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    return [Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))]


class Temporaries:
    """The library caches not in the temporary directory when a command starts: `remove()` (for a command that failed
    or was refused) takes away those made since that hold nothing (a cache in use, with files, stays)."""

    def __init__(self) -> None:
        self.new = [path for path in library_caches() if not os.path.lexists(path)]

    def remove(self) -> None:
        remove_empty(self.new)


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    """An exclusive advisory lock on the open file `fd` for the block (writers of one file take turns)."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _cut_to_whole_lines(fd: int, block: int = 1 << 16) -> None:
    """Drop what follows the last newline of the file `fd` is open on: a line a kill cut short (read from the end)."""
    end = position = os.lseek(fd, 0, os.SEEK_END)
    while position > 0:
        start = max(0, position - block)
        chunk = os.pread(fd, position - start, start)
        if position == end and chunk.endswith(b"\n"):
            return
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            os.ftruncate(fd, start + newline + 1)
            return
        position = start
    if end:
        os.ftruncate(fd, 0)  # not one whole line
