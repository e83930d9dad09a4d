"""Native code that can crash, run in a child process: a SIGILL or SIGSEGV there fails the one test that asked, with
the signal named, and the rest of the suite runs.

A binding built for another CPU (issue 66: llama.cpp built with AVX-512/AMX died with "Illegal instruction" in its
decode) kills the process it runs in, and pytest with it, so everything after it in the suite never ran. The test
calls `in_child(fn, *args)`: `fn` runs in a fresh Python process (multiprocessing's spawn), its return value (anything
picklable) comes back, an exception in it comes back as `ChildFailed` with the child's traceback, and a death by
signal as `ChildCrashed` naming the signal.

Spawned, not forked: `fn` must be a module-level function (the child imports its module), and the child starts
clean. A fork of the test process hung: llama.cpp's OpenMP calls bound to torch's libgomp (loaded first, the same
soname), whose thread pool, used by torch in the parent, does not survive a fork. Keep `fn`'s module light (the
native library under test and numpy): the comparisons against torch belong in the parent.
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class ChildCrashed(AssertionError):
    """The child died by a signal (or exited without a result)."""


class ChildFailed(AssertionError):
    """`fn` raised in the child; the message holds the child's traceback."""


def describe(exitcode: int | None) -> str:
    """'SIGILL (signal 4)' for a negative exit code, 'exit 3' for a positive one."""
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "signal"
        return f"{name} (signal {-exitcode})"
    return f"exit {exitcode}"


def _run(send, fn: Callable[..., Any], args: tuple) -> None:
    """The child's side: fn's result, or what it raised, back through the pipe."""
    try:
        outcome = ("ok", fn(*args))
    except BaseException as exc:  # noqa: B036 - everything the child raises goes back to the test
        outcome = ("raised", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    send.send(outcome)
    send.close()


def in_child(fn: Callable[..., T], *args: Any, timeout: float = 600, what: str = "native code") -> T:
    """`fn(*args)` in a child process; its result, or ChildFailed / ChildCrashed in words."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run, args=(send, fn, args), daemon=True)
    child.start()
    send.close()  # the parent's copy: a child that dies closes the last write end, and recv() sees EOF
    outcome = None
    try:
        if receive.poll(timeout):
            outcome = receive.recv()
    except EOFError:
        outcome = None
    finally:
        receive.close()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        child.join()
        raise ChildCrashed(f"{what}: the child process gave no result in {timeout:.0f} s and was killed")
    if outcome is None:
        raise ChildCrashed(f"{what}: the child process died with {describe(child.exitcode)} before it returned")
    kind, value = outcome
    if kind == "raised":
        raise ChildFailed(f"{what}, in the child process: {value}")
    return value
