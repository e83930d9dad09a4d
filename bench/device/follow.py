"""One follow-up device call: wait for a detached run, return as soon as it has ended or died, copy what it made.

A run longer than one device call (10 minutes) starts detached (`setsid`) and writes its own pid to a file; each later
call runs this. It waits at most --limit-s and returns as soon as the run's done file appears, its pid is gone (a run
that died), or the session's device time is nearly spent (--deadline-file: the epoch second the first call wrote,
after which no call should still be waiting), then says which in one line (RUN DONE, RUN GONE WITHOUT ITS DONE FILE,
RUN STILL GOING), prints the tail of the run's log and copies the files named by --collect into $OUT (a device call
brings back at most 8 files). Exit 0 when the run is done, 3 while it goes on, 4 when it died, 2 when nothing was
launched. Seen needed twice: runs lost to waits on a run that had already died (bench/next-device-session.md).

    python3 bench/device/follow.py --pid-file /tmp/r67.pid --done /tmp/r67-done --log /tmp/r67.log \\
        --deadline-file /tmp/deadline --limit-s 570 --collect /tmp/r67/summary.json /tmp/r67/bench.log
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RETURNS = 8  # files a device call brings back from $OUT
CODES = {"RUN DONE": 0, "RUN STILL GOING": 3, "RUN GONE WITHOUT ITS DONE FILE": 4}


@dataclass(frozen=True)
class Run:
    pid: int
    done: Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child of this process that exited is a zombie until reaped: gone all the same
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def stop_at(limit_s: float, deadline_file: Path | None) -> float:
    """The monotonic second to stop waiting: the limit, or the session's deadline where that comes first."""
    end = time.monotonic() + limit_s
    if deadline_file and deadline_file.is_file():
        end = min(end, time.monotonic() + float(deadline_file.read_text().split()[0]) - time.time())
    return end


def wait(run: Run, end: float, poll_s: float) -> str:
    while not run.done.exists() and alive(run.pid) and time.monotonic() < end:
        time.sleep(poll_s)
    if run.done.exists():
        return "RUN DONE"
    return "RUN STILL GOING" if alive(run.pid) else "RUN GONE WITHOUT ITS DONE FILE"


def collect(paths: list[Path], out: Path) -> list[str]:
    """Copy the files that exist into `out`, the first RETURNS of them; the names of those left out."""
    present = [p for p in paths if p.is_file()]
    out.mkdir(parents=True, exist_ok=True)
    for path in present[:RETURNS]:
        shutil.copy2(path, out / path.name)
    return [str(p) for p in paths if p not in present[:RETURNS]]


def tail(log: Path | None, lines: int) -> str:
    if not log or not log.is_file():
        return ""
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid-file", type=Path, required=True, help="the detached run's own pid, written at its start")
    parser.add_argument("--done", type=Path, required=True, help="the file the run writes when it has ended")
    parser.add_argument("--limit-s", type=float, default=570, help="wait at most this long (a call may run 600 s)")
    parser.add_argument("--deadline-file", type=Path, help="epoch second after which no call should be waiting")
    parser.add_argument("--log", type=Path, help="the run's log: its tail is printed")
    parser.add_argument("--tail", type=int, default=25)
    parser.add_argument("--collect", type=Path, nargs="*", default=[], help=f"files copied to $OUT (first {RETURNS})")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--poll-s", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not args.pid_file.is_file():
        print(f"follow: no {args.pid_file}: nothing was launched on this machine", flush=True)
        return 2
    run = Run(int(args.pid_file.read_text().split()[0]), args.done)
    state = wait(run, stop_at(args.limit_s, args.deadline_file), args.poll_s)
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {state}", flush=True)
    print(tail(args.log, args.tail), flush=True)
    left = collect(args.collect, args.out)
    if left:
        print(f"follow: not copied (absent, or over the {RETURNS} files a call returns): {', '.join(left)}")
    return CODES[state]


if __name__ == "__main__":
    sys.exit(main())
