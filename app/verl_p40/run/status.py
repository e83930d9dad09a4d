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
import threading
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
HEARTBEAT_S = 60  # `verl-p40 train` rewrites its run's `updated` this often while it lives, between steps too
STALE_MIN_S = 5 * 60  # a live run's record older than this and than 3 step times: its trainer stopped writing
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
        run = {"service": service()} if "started" in fields else dict(data.get("run") or {})
        run.update(fields, session=SESSION, updated=now())
        data["run"] = run

    update(logs, change)


@contextlib.contextmanager
def heartbeat(logs: str | Path, every: float = HEARTBEAT_S):
    """While the block runs, the run's `updated` is rewritten every `every` seconds (a validation or a save may take
    longer than a step): a run marked live whose record stops moving is one whose trainer died without a word."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            write_run(logs, heartbeat=now())

    thread = threading.Thread(target=beat, name="verl-p40 status heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def service() -> str | None:
    """The compose service this process is (VERL_P40_SERVICE), or None outside the stack."""
    return os.environ.get(SERVICE_ENV) or None


def phrased(compose: str, cli: str, started_by: str | None | bool = False) -> str:
    """A fix as the user can type it: `compose` for a run or service of the compose stack (`started_by`, the service
    a record names; left out: this process's VERL_P40_SERVICE), `cli` for one started with `verl-p40` itself."""
    return compose if (service() if started_by is False else started_by) else cli


def record_service(name: str, state: str, exit_code: int | None = None, line: str | None = None) -> None:
    """A service's outcome (running, ok, failed) in the status file of the logs folder (VERL_P40_LOGS)."""

    def change(data: dict) -> None:
        record = {"state": state, "time": now(), "session": SESSION, "exit_code": exit_code, "line": line}
        data["services"] = {**data.get("services", {}), name: record}

    update(defaults.LOGS.get(), change)


# ---------------------------------------------------------------------------------------------- saying


def lines(data: dict, at: float | None = None) -> tuple[list[str], int]:
    """What `verl-p40 status` prints, and its exit code: 0 while a run starts or runs and after it ended or stopped,
    1 when it or a service after its start failed, or its trainer stopped writing (dead). The services' failures and
    running services newer than the run's start come first (with `up -d` they are why no run started, or what it
    waits for); a service that is part of the run (the trainer's own) is the run. A run that had ended before a
    service failed or began is the previous one: its line is left out (the failure or the download is the story)."""
    run = data.get("run")
    started = _time(run.get("started")) if run else None
    over = run is not None and run["state"] not in ("starting", "running")
    ended = _time(run.get("updated")) if over else None
    out, failed, previous = [], False, False
    for name, record in sorted(data.get("services", {}).items(), key=lambda kv: kv[1]["time"]):
        if run and record.get("session") == run.get("session"):
            continue
        when = _time(record["time"])
        if started is not None and when <= started:
            continue
        if record["state"] == "ok":
            continue
        previous = previous or (ended is not None and when > ended)
        if record["state"] == "failed":
            failed = True
            said = record.get("line") or f"see `docker compose logs {name}`"
            out.append(f"{name} failed at {_clock(record['time'])} (exit {record.get('exit_code')}): {said}")
        else:
            out.append(_running_service(name, record))
    if run and not previous:
        line, dead = run_line(run, at)
        out.append(line)
        failed = failed or dead or run["state"] == "failed"
    elif not out:
        done = [n for n, r in data.get("services", {}).items() if r["state"] == "ok"]
        out.append(f"{', '.join(sorted(done)) or 'no service'} done; no training has started yet")
    return out, 1 if failed else 0


def _running_service(name: str, record: dict) -> str:
    doing = {"model-fetch": "downloading the model", "data-prep": "preparing the data", "doctor": "checking"}
    what = f": {doing[name]}" if name in doing else ""
    return f"{name} running since {_clock(record['time'])}{what} (`docker compose logs -f {name}` shows it)"


def run_line(run: dict, at: float | None) -> tuple[str, bool]:
    """The run's state in one line, and whether its trainer is likely dead (a live state nobody rewrites)."""
    state, progress = run["state"], run.get("progress")
    where = f" (log: {run['log']})" if run.get("log") else ""
    if state in ("starting", "running"):
        age = (at if at is not None else time.time()) - _time(run["updated"]).timestamp()
        if age > max(STALE_MIN_S, 3 * (run.get("step_s") or 0)):
            return _dead_line(run, age, where), True
    if state == "starting":
        return (
            f"training starting since {_clock(run['started'])}: Ray, the models and the data load; no step yet{where}"
        ), False
    if state == "running":
        return f"training: {progress or 'no step yet'} (updated {_ago(age)} ago){where}", False
    if state == "stopped":
        again = phrased(f"`docker compose up -d {run.get('service')}`", "the same command", run.get("service"))
        return f"training stopped on request at {_clock(run['updated'])}: {progress}; {again} resumes{where}", False
    if state == "ended":
        return f"training ended at {_clock(run['updated'])}{_took(run)}: {progress or 'no step logged'}{where}", False
    after = f" after {progress}" if progress else " before its first step"
    return (
        f"training failed at {_clock(run['updated'])} (exit {run.get('exit_code')}){after}: "
        f"{run.get('line') or 'the log says why'}{where}"
    ), False


def _dead_line(run: dict, age: float, where: str) -> str:
    """A run still marked live whose trainer stopped writing: killed (the OOM killer, `docker kill`, a reboot)
    before it could say so. The status service sees only the logs volume, not the trainer's process."""
    name = run.get("service") or "trainer"
    fix = phrased(
        f"`docker compose logs {name}` says why; `docker compose up -d {name}` resumes from the newest checkpoint",
        "the log says why; the same verl-p40 train command resumes from the newest checkpoint",
        run.get("service"),
    )
    at = run.get("progress") or ("no step yet" if run["state"] == "running" else "while starting, no step yet")
    return f"training: the trainer stopped writing {_ago(age)} ago ({at}); it is likely dead: {fix}{where}"


def _took(run: dict) -> str:
    start, end = _time(run.get("started")), _time(run.get("ended"))
    return f" after {duration((end - start).total_seconds())}" if start and end else ""


def _clock(text: str) -> str:
    moment = _time(text)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else text


def _ago(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 120 else f"{round(seconds / 60)} min"
