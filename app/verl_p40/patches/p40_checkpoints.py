# Installed into verl by verl-p40's patch set as verl/utils/p40_checkpoints.py; verl_p40.models.checkpoints imports
# the same file to read what it writes. Standard library only: it runs in verl's trainer process.
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
"""

from __future__ import annotations

import json
import os
import re
import shutil

from .p40_best import challenger_step, choose, line

TRACKER = "latest_checkpointed_iteration.txt"
COMPLETE = "verl-p40-complete"  # in global_step_N/: every file of the step is on disk
MARKED = "verl-p40-marked-saves"  # in the experiment folder: its saves are marked (a step without COMPLETE is not)
RUN_RECORD = "verl-p40-run.json"  # the run record (verl-p40 train); validations and the best step are kept in it
# p40_best.py's rule reads each validation's answers from <experiment>/validation (trainer.validation_data_dir)
_STEP = re.compile(r"global_step_([0-9]+)")


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


def step_folders(root: str) -> dict[int, str]:
    """Step number -> its `global_step_N` folder under `root`."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return {}
    found = {int(m.group(1)): os.path.join(root, n) for n in names if (m := _STEP.fullmatch(n))}
    return {step: path for step, path in found.items() if os.path.isdir(path)}


def is_complete(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, COMPLETE))


def complete_steps(root: str) -> list[int]:
    return sorted(step for step, folder in step_folders(root).items() if is_complete(folder))


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
    complete = [s for s in complete_steps(root) if s <= current]
    kept = set(complete[-keep:]) | {current}
    validations = read_validations(root)
    best = choose(root, validations, complete)
    kept |= {s for s in (best and best["step"], challenger_step(validations, complete)) if s}
    removed = []
    for step, folder in sorted(step_folders(root).items()):
        if step < current and step not in kept:
            begin(folder)
            shutil.rmtree(folder, ignore_errors=True)
            print(f"verl-p40: removed checkpoint {folder} (keeping {keep} and the steps best may take)", flush=True)
            removed.append(folder)
    return removed


def accuracy_of(metrics: dict) -> float | None:
    """The validation accuracy among verl's validation metrics: `val-core/<source>/acc/mean@N` (verl-p40's reward
    gives `acc`), else the first `val-core/` mean (verl's `reward`)."""
    core = [k for k in metrics if k.startswith("val-core/") and "/mean@" in k]
    preferred = [k for k in core if "/acc/" in k] or core
    return float(metrics[preferred[0]]) if preferred else None


def _read_record(root: str) -> dict:
    try:
        with open(os.path.join(root, RUN_RECORD), encoding="utf-8") as handle:
            record = json.load(handle)
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def read_validations(root: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in _read_record(root).get("validations", {}).items()}


def update_best(root: str, validations: dict[int, float] | None = None, saving: int | None = None) -> dict | None:
    """Write the validations and the best saved step (`saving`: a step whose save follows) into the run record."""
    record = _read_record(root)
    validations = read_validations(root) if validations is None else validations
    saved = set(complete_steps(root)) | ({saving} if saving is not None else set())
    best = choose(root, validations, saved)
    if not validations and "best" not in record:
        return None
    record["validations"] = {str(k): v for k, v in sorted(validations.items())}
    record["best"] = best
    os.makedirs(root, exist_ok=True)
    write_durably(os.path.join(root, RUN_RECORD), json.dumps(record, indent=2) + "\n")
    return best


def record_validation(root: str, step: int, metrics: dict, saving: bool) -> str | None:
    """Keep step `step`'s validation accuracy in the run record; the console line that says which step is best."""
    accuracy = accuracy_of(metrics)
    if accuracy is None:
        return None
    validations = {**read_validations(root), step: accuracy}
    best = update_best(root, validations, step if saving else None)
    said = f"verl-p40: validation accuracy {accuracy:.1%} at step {step}"
    if best is None:
        said += "; no validated step is saved yet" + ("" if step == 0 else " (save at every validation)")
    else:
        said += f"; best: {line(best)}"
    print(said, flush=True)
    return said
