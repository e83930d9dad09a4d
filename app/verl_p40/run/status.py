"""The stack's status file, `<logs>/status.json`: where the training run is (rewritten at every step by `verl-p40
train`), and how the latest model-fetch, data-prep and doctor went (each service of the compose stack records its
outcome when VERL_P40_SERVICE names it), so that `verl-p40 status` (the compose one-off `docker compose run --rm
status`) can say in a line what happened last, also after a run ended or failed, and after a service failed under
`docker compose up -d`, which prints only its exit code.

Every write replaces the file whole (`verl_p40.atomic`) under a lock beside it (two services may finish at once); a
write that fails is said once and never stops the work it describes. The reader checks what it reads and says in
one line what is wrong with a file it cannot use.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from verl_p40 import UserError, defaults, state_files
from verl_p40.atomic import write_text
from verl_p40.run.progress import duration

NAME = "status.json"
VERSION = 1
SERVICE_ENV = "VERL_P40_SERVICE"  # compose sets it on model-fetch, data-prep, doctor and the trainer
RUN_STATES = ("starting", "running", "ended", "stopped", "failed")
SERVICE_STATES = ("running", "ok", "failed")
SESSION = uuid.uuid4().hex  # this process: a service's record and the run it started are one story, not two
_warned: set[str] = set()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def path_in(logs: str | Path) -> Path:
    return Path(logs).expanduser() / NAME


# ---------------------------------------------------------------------------------------------- reading


def read(logs: str | Path) -> dict | None:
    """The status file in `logs`, checked (through the one reader of state files); None when there is none. A file
    that is not one raises UserError."""
    path = path_in(logs)
    data, problem = state_files.read_json(path, kind=object)
    problem = problem or (None if data is None else _problem(data))
    if problem:
        raise UserError(f"{path}: {_corrupt(problem)}")
    return data


def _corrupt(why: str) -> str:
    return (
        f"not a status file of verl-p40 ({why}): the next training step or service rewrites it; remove it to start "
        "afresh"
    )


def _problem(data) -> str | None:
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("version") != VERSION:
        return f"version {data.get('version')!r}, this verl-p40 reads {VERSION}"
    run, services = data.get("run"), data.get("services", {})
    if run is not None and (not isinstance(run, dict) or run.get("state") not in RUN_STATES):
        return "its run has no known state"
    if not isinstance(services, dict) or any(
        not isinstance(s, dict) or s.get("state") not in SERVICE_STATES or not isinstance(s.get("time"), str)
        for s in services.values()
    ):
        return "a service record has no known state or time"
    for record in ([run] if run else []) + list(services.values()):
        for key in ("started", "updated", "time", "ended"):
            if record.get(key) is not None and _time(record[key]) is None:
                return f"{key} {record[key]!r} is not a time"
    return None


def _time(text) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------- writing


def update(logs: str | Path, change) -> None:
    """Read the file, apply `change(data)`, write it back whole; under the lock beside it. A failure (a read-only or
    full disk, a file that is not a status file) is said once on stderr and the work goes on."""
    path = path_in(logs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            try:
                data = read(logs) or {}
            except UserError:
                data = {}  # a file this version cannot use is replaced, never a reason to stop a run
            data = {**data, "version": VERSION}
            change(data)
            data["updated"] = now()
            write_text(path, json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        if str(path) not in _warned:
            _warned.add(str(path))
            print(f"[verl-p40] {path}: status not written ({exc.strerror or exc}); the run goes on", file=sys.stderr)


@contextlib.contextmanager
def _locked(path: Path):
    with open(path.parent / f".{path.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_run(logs: str | Path, **fields) -> None:
    """The training run's part: `state` and what it knows now (step, times, line); a new `started` begins a run."""

    def change(data: dict) -> None:
        run = {} if "started" in fields else dict(data.get("run") or {})
        run.update(fields, session=SESSION, updated=now())
        data["run"] = run

    update(logs, change)


def service() -> str | None:
    """The compose service this process is (VERL_P40_SERVICE), or None outside the stack."""
    return os.environ.get(SERVICE_ENV) or None


def record_service(name: str, state: str, exit_code: int | None = None, line: str | None = None) -> None:
    """A service's outcome (running, ok, failed) in the status file of the logs folder (VERL_P40_LOGS)."""

    def change(data: dict) -> None:
        record = {"state": state, "time": now(), "session": SESSION, "exit_code": exit_code, "line": line}
        data["services"] = {**data.get("services", {}), name: record}

    update(defaults.LOGS.get(), change)


# ---------------------------------------------------------------------------------------------- saying


def lines(data: dict, at: float | None = None) -> tuple[list[str], int]:
    """What `verl-p40 status` prints, and its exit code: 0 while a run starts or runs and after it ended or stopped,
    1 when it or a service after its start failed. The services' failures newer than the run's start come first
    (with `up -d` they are why no run started); a service that is part of the run (the trainer's own) is the run."""
    run = data.get("run")
    started = _time(run.get("started")) if run else None
    out, failed = [], False
    for name, record in sorted(data.get("services", {}).items(), key=lambda kv: kv[1]["time"]):
        if run and record.get("session") == run.get("session"):
            continue
        if started is not None and _time(record["time"]) <= started:
            continue
        if record["state"] == "failed":
            failed = True
            said = record.get("line") or f"see `docker compose logs {name}`"
            out.append(f"{name} failed at {_clock(record['time'])} (exit {record.get('exit_code')}): {said}")
        elif record["state"] == "running" and not run:
            out.append(f"{name} running since {_clock(record['time'])}")
    if run:
        out.append(run_line(run, at))
        failed = failed or run["state"] == "failed"
    elif not out:
        done = [n for n, r in data.get("services", {}).items() if r["state"] == "ok"]
        out.append(f"{', '.join(sorted(done)) or 'no service'} done; no training has started yet")
    return out, 1 if failed else 0


def run_line(run: dict, at: float | None = None) -> str:
    """The run's state in one line."""
    state, progress = run["state"], run.get("progress")
    where = f" (log: {run['log']})" if run.get("log") else ""
    if state == "starting":
        return (
            f"training starting since {_clock(run['started'])}: Ray, the models and the data load; no step yet{where}"
        )
    if state == "running":
        age = (at if at is not None else time.time()) - _time(run["updated"]).timestamp()
        return f"training: {progress or 'no step yet'} (updated {_ago(age)} ago){where}"
    if state == "stopped":
        return f"training stopped on request at {_clock(run['updated'])}: {progress}; the same command resumes{where}"
    if state == "ended":
        return f"training ended at {_clock(run['updated'])}{_took(run)}: {progress or 'no step logged'}{where}"
    after = f" after {progress}" if progress else " before its first step"
    return (
        f"training failed at {_clock(run['updated'])} (exit {run.get('exit_code')}){after}: "
        f"{run.get('line') or 'the log says why'}{where}"
    )


def _took(run: dict) -> str:
    start, end = _time(run.get("started")), _time(run.get("ended"))
    return f" after {duration((end - start).total_seconds())}" if start and end else ""


def _clock(text: str) -> str:
    moment = _time(text)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else text


def _ago(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 120 else f"{round(seconds / 60)} min"
