# Installed into verl by verl-p40's patch set as verl/utils/p40_checkpoints.py, beside p40_run_folder.py (which
# reads what it writes, here and for verl_p40.models.checkpoints) and p40_best.py. Standard library only: it runs in
# verl's trainer process.
"""Durable, atomic checkpoint bookkeeping for verl 0.5.0's trainer, and the best step kept in the run record.

verl 0.5.0 writes `latest_checkpointed_iteration.txt` with a plain open("w") (a power cut can leave it empty or
naming a step whose files never reached the disk) and deletes the oldest checkpoint before it writes the new one,
from a list kept in memory (empty after a resume). With this module a save is:

1. `begin`: the step's completion marker is removed (a step folder being written is never taken as complete);
2. verl's workers write the step's files (their own retention turned off by the patch set);
3. `commit`: every file and folder of the step fsynced, the marker written (temp file, fsync, rename, fsync of the
   folder), then the tracker the same way, then `retain`: the folders beyond `keep` removed, oldest first, never the
   newest complete one, nor the step `best` hands over (p40_best.py), nor the saved step of highest validation
   accuracy (the only earlier step `best` can hand over later).

So at every moment the tracker names a complete step, and at least one complete step is on disk.

A run record the trainer finds damaged (p40_run_folder.read_record: not whole JSON, not an object, a validation that
is not an accuracy) is said in one line, kept aside as `verl-p40-run.json.damaged-<time>` and never rewritten from
empty (which would drop how the run was made: its algorithm, LoRA's alpha). Training goes on: until a whole record is
put back, no validation is kept and retention removes nothing (it cannot know which step `best` would take).
"""

from __future__ import annotations

import json
import os
import shutil
import time

from .p40_best import challenger_step, choose, line
from .p40_run_folder import (
    COMPLETE,
    MARKED,
    RUN_RECORD,
    TRACKER,
    accuracy_of,
    complete_steps,
    read_record,
    step_folders,
    validations,
)


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str) -> None:
    """Every file, then every folder (deepest first) of `folder`, fsynced, and the folder's own entry in its parent."""
    for where, _dirs, files in os.walk(folder, topdown=False):
        for name in files:
            fsync_path(os.path.join(where, name))
        fsync_path(where)
    fsync_path(os.path.dirname(os.path.abspath(folder)))


def write_durably(path: str, text: str) -> None:
    """`text` into `path`: a temporary file beside it, fsynced, renamed onto it, and the folder fsynced."""
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fsync_path(os.path.dirname(os.path.abspath(path)))


def begin(step_folder: str) -> None:
    """A save of `step_folder` starts: it is not complete until `commit` says so again."""
    marker = os.path.join(step_folder, COMPLETE)
    if os.path.exists(marker):
        os.unlink(marker)
        fsync_path(step_folder)


def commit(root: str, step: int, keep: int | None = None) -> list[str]:
    """The step's files are all written: make them durable, mark the step complete, point the tracker at it, then
    apply retention (`keep` newest complete steps plus the best validated one). Returns the folders removed."""
    folder = os.path.join(root, f"global_step_{step}")
    fsync_tree(folder)
    if not os.path.exists(os.path.join(root, MARKED)):
        write_durably(os.path.join(root, MARKED), "saves here are complete where global_step_N/verl-p40-complete is\n")
    write_durably(os.path.join(folder, COMPLETE), f"{step}\n")
    write_durably(os.path.join(root, TRACKER), str(step))
    removed = retain(root, step, keep)
    update_best(root)
    return removed


def retain(root: str, current: int, keep: int | None) -> list[str]:
    """Remove the step folders older than `current` beyond the `keep` newest complete ones, except the step `best`
    hands over and the validated one of highest accuracy (p40_best.py); a folder's marker goes first, so a removal cut
    short leaves an incomplete folder, never a complete-looking partial one. `keep` None or < 1: keep everything."""
    if not keep or keep < 1:
        return []
    record, _problem = open_record(root)
    if record is None:  # a damaged record: which step `best` takes is unknown, so none goes (said when kept aside)
        return []
    complete = [s for s in complete_steps(root) if s <= current]
    kept = set(complete[-keep:]) | {current}
    found = validations(record)
    best = choose(root, found, complete)
    kept |= {s for s in (best and best["step"], challenger_step(found, complete)) if s}
    removed = []
    for step, folder in sorted(step_folders(root).items()):
        if step < current and step not in kept:
            begin(folder)
            shutil.rmtree(folder, ignore_errors=True)
            print(f"verl-p40: removed checkpoint {folder} (keeping {keep} and the steps best may take)", flush=True)
            removed.append(folder)
    return removed


def keep_aside(root: str, problem: str) -> str:
    """Move the damaged run record out of the way (renamed, never rewritten) and say so in one line."""
    path = os.path.join(root, RUN_RECORD)
    aside = f"{path}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
    while os.path.exists(aside):
        aside += "-1"
    try:
        os.replace(path, aside)
        fsync_path(root)
    except OSError as exc:  # left where it is, and still never written over
        aside = f"nowhere: cannot move it ({exc.strerror or exc}), left as it is"
    print(
        f"verl-p40: {path}: {problem}; kept aside as {aside}, never rewritten from empty; training goes on, but no "
        "validation is kept and no checkpoint removed until a whole record is put back there (repair the one kept "
        "aside, or restore a copy)",
        flush=True,
    )
    return aside


def open_record(root: str) -> tuple[dict | None, str | None]:
    """The run record to add to ({} when there is none yet), or (None, why it cannot be: a damaged one, kept aside now
    or earlier in the run)."""
    record, problem = read_record(root)
    if problem is None:
        return record or {}, None
    if os.path.exists(os.path.join(root, RUN_RECORD)):  # damaged now: kept aside, said once
        problem = f"the run record was damaged and is kept aside as {keep_aside(root, problem)}"
    return None, problem


def update_best(root: str, found: dict[int, float] | None = None, saving: int | None = None) -> dict | None:
    """Write the validations and the best saved step (`saving`: a step whose save follows) into the run record; None
    when no step is best, or the record is damaged (kept aside, not written)."""
    record, _problem = open_record(root)
    if record is None:
        return None
    found = validations(record) if found is None else found
    saved = set(complete_steps(root)) | ({saving} if saving is not None else set())
    best = choose(root, found, saved)
    if not found and "best" not in record:
        return None
    record["validations"] = {str(k): v for k, v in sorted(found.items())}
    record["best"] = best
    os.makedirs(root, exist_ok=True)
    write_durably(os.path.join(root, RUN_RECORD), json.dumps(record, indent=2) + "\n")
    return best


def record_validation(root: str, step: int, metrics: dict, saving: bool) -> str | None:
    """Keep step `step`'s validation accuracy in the run record; the console line that says which step is best."""
    accuracy = accuracy_of(metrics)
    if accuracy is None:
        return None
    said = f"verl-p40: validation accuracy {accuracy:.1%} at step {step}"
    record, problem = open_record(root)
    if record is None:
        said += f"; not kept ({problem})"
    else:
        best = update_best(root, {**validations(record), step: accuracy}, step if saving else None)
        if best is None:
            said += "; no validated step is saved yet" + ("" if step == 0 else " (save at every validation)")
        else:
            said += f"; best: {line(best)}"
    print(said, flush=True)
    return said
