# Installed into verl by verl-p40's patch set as verl/utils/p40_run_folder.py, beside p40_best.py and
# p40_checkpoints.py, which import it; verl_p40.models.checkpoints (latest, best, the resume check) and
# verl_p40.state_files read through the same file. Standard library only: it runs in verl's trainer process.
"""The one reader of a run's folder (`<checkpoints>/<experiment>/`): verl's tracker, the step folders and which of
them completed, the run record (its validations and best step), each validation's per-question results, and the key
of the validation accuracy among verl's metrics.

Nothing here writes or raises: a read gives its value and None, or what is wrong in words a line can carry (bytes
that are not UTF-8, JSON cut short or edited, JSON of another shape), never a traceback and never "nothing there" for
a damaged file. The caller decides: the trainer (p40_checkpoints.py) keeps a damaged record aside and trains on, the
CLI (verl_p40.models.checkpoints) ends in one line naming the file and the fix.

The folder:
- `latest_checkpointed_iteration.txt`: verl's tracker, the step a resume starts from;
- `global_step_N/`: a save; complete when `global_step_N/verl-p40-complete` is there (in a folder whose saves are
  marked: `verl-p40-marked-saves`; an older verl-p40's unmarked folder counts the tracker's step, as verl did);
- `verl-p40-run.json`: the run record (`verl-p40 train` writes how the run was made; the trainer adds every
  validation's accuracy and the best saved step); one the trainer found damaged is kept aside beside it as
  `verl-p40-run.json.damaged-<time>`;
- `validation/<step>.jsonl`: verl's per-question validation results (`trainer.validation_data_dir`).
"""

from __future__ import annotations

import json
import os
import re

TRACKER = "latest_checkpointed_iteration.txt"
COMPLETE = "verl-p40-complete"  # in global_step_N/: every file of the step is on disk
MARKED = "verl-p40-marked-saves"  # in the experiment folder: its saves are marked (a step without COMPLETE is not)
RUN_RECORD = "verl-p40-run.json"  # the run record; validations and the best step are kept in it
KEPT_ASIDE = RUN_RECORD + ".damaged-"  # + the time: a damaged record the trainer moved out of the way
VALIDATION_FOLDER = "validation"  # <step>.jsonl, verl's per-question validation results
# verl's validation accuracy: `val-core/<data source>/<reward part>/mean@<answers>`, with verl_p40.reward's `acc`
VALIDATION_KEY = "val-core/openai/gsm8k/acc/mean@1"
_CORE = VALIDATION_KEY.split("/", 1)[0] + "/"
_STEP = re.compile(r"global_step_([0-9]+)")
_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false"}


# ------------------------------------------------------------------------------------------------ files, checked


def read_text(path) -> tuple[str | None, str | None]:
    """(its text, None); (None, None) when there is no such file; (None, what is wrong)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None, None
    except IsADirectoryError:
        return None, "a folder, not a file"
    except OSError as exc:
        return None, f"cannot read it ({exc.strerror or exc})"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"


def kind_of(value) -> str:
    return "null" if value is None else _KINDS.get(type(value), type(value).__name__)


def read_json(path, kind: type = dict):
    """(its value, None) when it is whole JSON of `kind`; (None, None) when there is no such file; (None, what is
    wrong)."""
    text, problem = read_text(path)
    if text is None:
        return None, problem
    if not text.strip():
        return None, "empty"
    try:
        value = json.loads(text)
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:
        at = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "its text"
        return None, f"not whole JSON ({exc.msg.lower() if hasattr(exc, 'msg') else exc} at {at}: cut short or edited)"
    if not isinstance(value, kind):
        return None, f"holds {kind_of(value)}, not {_KINDS[kind]}"
    return value, None


# ------------------------------------------------------------------------------------------------ steps


def read_tracker(path) -> tuple[int, str | None]:
    """(the step verl's tracker names, None), or (-1 when it cannot be read, -2 when it is not a step; what is
    wrong with it)."""
    text, problem = read_text(path)
    if text is None:
        if problem == "not UTF-8 text":
            return -2, f"cannot read it ({problem})"
        return -1, problem or "cannot read it (not there)"
    step = text.strip()
    if not re.fullmatch(r"[0-9]+", step):
        return -2, f"says {step[:40]!r}, not a step number"
    return int(step), None


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
    """The steps whose save completed (the marker, written after every file of the step was fsynced). A folder saved
    without markers (an older verl-p40: no MARKED file) is taken as verl took it: the tracker's step, when its
    folder is there."""
    if os.path.exists(os.path.join(root, MARKED)):
        return sorted(step for step, folder in step_folders(root).items() if is_complete(folder))
    step, problem = read_tracker(os.path.join(root, TRACKER))
    return [step] if problem is None and os.path.isdir(os.path.join(root, f"global_step_{step}", "actor")) else []


def half_written(root: str) -> list[str]:
    """The step folders whose save was cut short (no completion marker), by name."""
    done = set(complete_steps(root))
    folders = step_folders(root)
    return [os.path.basename(folders[s]) for s in sorted(folders) if s not in done]


# ------------------------------------------------------------------------------------------------ the run record


def kept_aside(root: str) -> list[str]:
    """The damaged run records the trainer kept aside in `root`, oldest first."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(os.path.join(root, n) for n in names if n.startswith(KEPT_ASIDE))


def read_record(root: str) -> tuple[dict | None, str | None]:
    """(the run record, None) when it is whole and its validations and best are of their shape; (None, None) when
    there is none; (None, what is wrong: damaged, or not there because the trainer kept a damaged one aside)."""
    record, problem = read_json(os.path.join(root, RUN_RECORD))
    if record is None:
        aside = kept_aside(root) if problem is None else []
        if aside:
            problem = f"not there: verl-p40's trainer found it damaged: kept aside as {aside[-1]}"
        return None, problem
    return (None, problem) if (problem := _shape_problem(record)) else (record, None)


def _shape_problem(record: dict) -> str | None:
    found = record.get("validations", {})
    if not isinstance(found, dict):
        return f"its validations are {kind_of(found)}, not an object"
    for key, value in found.items():
        if not re.fullmatch(r"[0-9]+", str(key)):
            return f"validation {key!r} is not a step number"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            return f"the validation accuracy of step {key} is {json.dumps(value)}, not a number from 0 to 1"
    best = record.get("best")
    step = best.get("step") if isinstance(best, dict) else None
    if best is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return f"its best step is {json.dumps(best)[:60]}, not a step"
    return None


def validations(record: dict | None) -> dict[int, float]:
    """{step: validation accuracy} of a record `read_record` gave."""
    return {int(k): float(v) for k, v in (record or {}).get("validations", {}).items()}


def best_problem(root: str, record: dict, record_fix: str) -> str | None:
    """What is wrong with the best step a whole record names, checked against the step folders (a folder gone, a save
    that did not complete, an accuracy its validations do not give), with the fix (`record_fix` for the record's
    own); None when nothing is."""
    best = record.get("best")
    if best is None:
        return None
    step, folder = best["step"], os.path.join(root, f"global_step_{best['step']}")
    fix = "pass the step you mean as .../global_step_N/actor instead of best"
    if not os.path.isdir(os.path.join(folder, "actor")):
        said = "is not there" if not os.path.exists(folder) else "has no actor folder"
        return f"names step {step} as the best, but {folder} {said}; restore that folder, or {fix}"
    if step not in complete_steps(root):
        return f"names step {step} as the best, but the save of {folder} did not complete; {fix}"
    found = validations(record)
    if step not in found or best.get("accuracy") != found[step]:
        said = "no validation" if step not in found else f"validation accuracy {found[step]}"
        return (
            f"names step {step} as the best with accuracy {json.dumps(best.get('accuracy'))}, but its validations "
            f"give that step {said}: the record disagrees with itself; {record_fix}"
        )
    return None


# ------------------------------------------------------------------------------------------------ validations


def validation_metrics(metrics: dict) -> dict:
    """The validation's own metrics (verl's `val-core/...`) among a step's metrics, as they were logged."""
    return {k: v for k, v in metrics.items() if k.startswith(_CORE)}


def accuracy_of(metrics: dict) -> float | None:
    """The validation accuracy among verl's validation metrics: VALIDATION_KEY's part (`acc`) of any data source and
    number of answers, else the first `val-core/` mean (verl's own reward's `reward`)."""
    core = [k for k in metrics if k.startswith(_CORE) and "/mean@" in k]
    part = "/" + VALIDATION_KEY.split("/")[-2] + "/"
    preferred = [k for k in core if part in k] or core
    return float(metrics[preferred[0]]) if preferred else None


def results_path(root: str, step: int) -> str:
    return os.path.join(root, VALIDATION_FOLDER, f"{step}.jsonl")


def read_results(path: str) -> tuple[dict[str, float] | None, str | None]:
    """(question -> its result, the mean of its answers' `acc`, else `score`), or (None, what is wrong, in words)."""
    text, problem = read_text(path)
    if text is None:
        if problem is None:
            return None, f"{path} is not there (validated before verl-p40 kept each validation's answers)"
        return None, f"{path}: {problem if problem.startswith('cannot') else f'cannot read it ({problem})'}"
    lines = text.split("\n")
    if lines[-1] != "":  # verl ends every line, the last one too
        return None, f"{path}:{len(lines)}: cut short (its last line is not whole); the step cannot be paired"
    sums: dict[str, list[float]] = {}
    for number, line in enumerate(lines[:-1], 1):
        try:
            row = json.loads(line)
            result = float(row["acc"] if "acc" in row else row["score"])
            question = row["input"]
        except (ValueError, TypeError, KeyError):
            return None, f"{path}:{number}: not a line of verl's validation results (input, score); cut short?"
        sums.setdefault(question, []).append(result)
    if not sums:
        return None, f"{path}: empty"
    return {q: sum(r) / len(r) for q, r in sums.items()}, None
