"""verl FSDP checkpoints as Hugging Face models: find the newest (`latest`), merge one with verl's own
`verl.model_merger` (fp32) into `.../actor/merged_hf_fp32`, kept there as a cache, and fold a LoRA adapter into the
weights with the run's alpha.

verl's merger writes a LoRA checkpoint as the base weights plus a `lora_adapter/` folder whose config says
`lora_alpha: 0` (verl 0.5.0 does not know the run's alpha there); `verl-p40 train` records the alpha in
`verl-p40-run.json` beside the checkpoints, and the adapter is kept, with the right alpha, beside the merged model.

The run's folder is read by `verl_p40.patches.p40_run_folder`, the reader verl's trainer uses too; this module turns
what it finds wrong into the one line that ends the command (`UserError`), with the fix.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from verl_p40 import UserError
from verl_p40.atomic import staged
from verl_p40.models.options import BEST, LATEST
from verl_p40.patches import p40_best
from verl_p40.patches import p40_checkpoints as checkpoint_files
from verl_p40.patches import p40_run_folder as run_folder

TRACKER = run_folder.TRACKER

MERGED = "merged_hf_fp32"
RUN_RECORD = run_folder.RUN_RECORD  # written by `verl-p40 train` in <checkpoints>/<experiment>/


def latest_checkpoint(root: Path) -> Path:
    """The actor folder of the newest `global_step_N` under `root` (any experiment), per verl's tracker file; a
    tracker that names a step whose save never completed counts as broken."""
    best: tuple[float, Path] | None = None
    broken: list[tuple[float, str]] = []  # trackers that name no checkpoint here, with their times
    for tracker in Path(root).glob(f"**/{TRACKER}"):
        step, problem = read_tracker(tracker)
        if problem:
            broken.append((tracker.stat().st_mtime if step != -1 else 0.0, f"{tracker}: {problem}"))
            continue
        actor = tracker.parent / f"global_step_{step}" / "actor"
        if not actor.is_dir():
            broken.append((tracker.stat().st_mtime, f"{tracker}: names step {step}, but {actor} is not there"))
        elif step not in complete_steps(tracker.parent):
            broken.append((tracker.stat().st_mtime, f"{tracker}: names step {step}, whose save did not complete"))
        elif best is None or tracker.stat().st_mtime > best[0]:
            best = (tracker.stat().st_mtime, actor)
    newest_broken = max(broken, default=None)
    # a broken tracker newer than every good one is the run the user means: never fall back to an older one quietly
    if newest_broken and (best is None or newest_broken[0] > best[0]):
        raise UserError(
            f"{newest_broken[1]}; pass the checkpoint's actor folder (.../global_step_N/actor) instead of latest, "
            "or write the step of one that is there into that file"
        )
    if best is None:
        raise UserError(f"{root}: no verl checkpoint ({TRACKER}) found; train first")
    return best[1]


def read_tracker(tracker: Path) -> tuple[int, str | None]:
    """(the step verl's tracker names, None), or (-1 when it cannot be read, -2 when it is not a step; what is
    wrong with it)."""
    return run_folder.read_tracker(tracker)


def complete_steps(experiment: Path) -> list[int]:
    """The steps of an experiment folder whose save completed (`p40_run_folder.complete_steps`)."""
    return run_folder.complete_steps(str(experiment))


def half_written(experiment: Path) -> list[str]:
    """The step folders whose save was cut short (no completion marker), by name."""
    return run_folder.half_written(str(experiment))


def resume_line(experiment: Path) -> str:
    """Where a resumed run starts, in one line, naming the half-written step folders it ignores. A tracker that names
    no complete step is pointed (durably) at the newest complete one, so verl never starts from scratch silently."""
    tracker = Path(experiment) / TRACKER
    done = complete_steps(experiment)
    skipped = half_written(experiment)
    ignored = (
        f"; {', '.join(skipped)} ignored (its save was cut short: the step is trained and saved again)"
        if skipped
        else ""
    )
    if not done:
        if tracker.exists():  # verl would fail on it, or resume from a folder that is not whole
            tracker.unlink()
        return f"no complete checkpoint in {experiment}: training from the start{ignored}"
    step, problem = read_tracker(tracker) if tracker.exists() else (-1, "missing")
    if problem is None and step in done:
        return f"resuming from {experiment / f'global_step_{step}'}{ignored}"
    checkpoint_files.write_durably(str(tracker), str(done[-1]))
    said = problem or f"names step {step}, whose save did not complete"
    return f"{tracker}: {said}; resuming from the newest complete checkpoint, global_step_{done[-1]}{ignored}"


def best_checkpoint(root: Path) -> tuple[Path, str]:
    """The actor folder of the saved step `best` hands over in the newest run under `root` (the rule of
    `verl_p40.patches.p40_best`), and the line saying which step that is and why; the newest step when no saved step
    was validated."""
    latest = latest_checkpoint(root)
    experiment = latest.parent.parent
    validations = validated_history(experiment)
    best = p40_best.choose(str(experiment), validations, complete_steps(experiment))
    if best is None:
        step = latest.parent.name.removeprefix("global_step_")
        return latest, f"best: no saved step of {experiment} was validated; taking the newest, step {step}"
    return experiment / f"global_step_{best['step']}" / "actor", f"best: {p40_best.line(best, f' of {experiment}')}"


RECORD_FIX = (
    "restore it from a copy, or move it away (the next verl-p40 train writes a new one, without the validations it "
    "held) and pass the step you mean as .../global_step_N/actor instead of best"
)
KEPT_ASIDE_FIX = (
    "repair that file and move it back (or restore a copy), or remove it to go on without its validations (best "
    "then takes the newest step); or pass the step you mean as .../global_step_N/actor instead of best"
)


def read_run_record(experiment: Path) -> dict:
    """The run record of an experiment folder, read whole and of its shape ({} when there is none); else the one
    line naming it and the fix."""
    path = Path(experiment) / RUN_RECORD
    record, problem = run_folder.read_record(str(experiment))
    if problem:
        raise UserError(f"{path}: {problem}; {RECORD_FIX if path.exists() else KEPT_ASIDE_FIX}")
    return record or {}


def validated_history(experiment: Path) -> dict[int, float]:
    """{step: validation accuracy} from the run record of `experiment`, read whole and checked against its step
    folders: a record that cannot be read whole, a validation that is not a step with an accuracy from 0 to 1, or a
    best step whose folder is gone, whose save did not complete or whose accuracy is not its validation's, is the one
    line naming the record and the fix, never a history of fewer steps (which would hand over another step)."""
    record = read_run_record(experiment)
    problem = run_folder.best_problem(str(experiment), record, RECORD_FIX)
    if problem:
        raise UserError(f"{Path(experiment) / RUN_RECORD}: {problem}")
    return run_folder.validations(record)


def is_fsdp_checkpoint(path: Path) -> bool:
    return any(path.glob("model_world_size_*_rank_*.pt"))


def merge_command(actor: Path, target: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor),
        "--target_dir",
        str(target),
    ]


def resolve_model(spec: str, checkpoints: Path) -> Path:
    """A Hugging Face model folder for `spec`, merging a verl FSDP checkpoint first when needed."""
    path = chosen(spec, checkpoints)
    if (path / "config.json").is_file() and not is_fsdp_checkpoint(path):
        return verified(path)
    if not is_fsdp_checkpoint(path) and is_fsdp_checkpoint(path / "actor"):
        path = path / "actor"  # a step folder (.../global_step_N): the model is its actor
    if not is_fsdp_checkpoint(path):
        raise UserError(f"{path}: neither a Hugging Face model folder (config.json) nor a verl FSDP checkpoint")
    target = path / MERGED
    if target.exists():  # merged before: the cache is used when it is whole
        return verified(target, f"; remove {target} to merge the checkpoint again")
    target = merge_place(path)
    print(f"[verl-p40] merging {path} with verl's model merger into {target} (fp32)", flush=True)
    with staged([target], directory=True) as (out,), tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        merged = Path(scratch) / "merged"
        env = {**os.environ, "VERL_MERGE_DTYPE": "fp32"}
        result = subprocess.run(merge_command(path, merged), env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise UserError(
                f"{path}: verl's model merger failed ({merger_error(result.stderr)}); is the checkpoint whole? "
                "Pass another step's .../global_step_N/actor, or train again"
            )
        if (merged / ADAPTER).is_dir():
            print(f"[verl-p40] {fold(merged, path, out)}", flush=True)
        else:
            shutil.copytree(merged, out, dirs_exist_ok=True)
    return verified(target, f"; verl's model merger wrote it from {path}")


def merge_place(actor: Path) -> Path:
    """Where the merged model of `actor` goes: beside it, kept as a cache; or, when that folder cannot be written (a
    read-only disk or `:ro` volume, another user's folder), a folder in the temporary directory ($TMPDIR) for this
    command only, said in one line. Neither writable: the one line naming both."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{MERGED}.", suffix=".tmp", dir=actor))
        return actor / MERGED
    except OSError as exc:
        beside = exc.strerror or str(exc)
    try:
        scratch = Path(tempfile.mkdtemp(prefix="verl-p40-merged-"))
    except OSError as exc:
        raise UserError(
            f"{actor}: cannot write the merged model beside it ({beside}), nor in the temporary directory "
            f"{tempfile.gettempdir()} ({exc.strerror or exc}); set TMPDIR to a folder with room for it (about 4 bytes "
            "a parameter), or pass a merged Hugging Face folder instead"
        ) from None
    atexit.register(shutil.rmtree, scratch, True)
    print(
        f"[verl-p40] {actor}: cannot write the merged model beside it ({beside}); merging into {scratch} for this "
        "command only (removed when it ends; set TMPDIR for another place)",
        flush=True,
    )
    return scratch / actor.parent.name / actor.name / MERGED  # .../global_step_N/actor/merged_hf_fp32, as beside it


def chosen(spec: str, checkpoints: Path) -> Path:
    """`latest` or `best` as an actor folder (and the line saying which step was taken), else the path given."""
    if spec == LATEST:
        path = latest_checkpoint(checkpoints)
        print(f"[verl-p40] latest: {path.parent.name} of {path.parent.parent}", flush=True)
        return path
    if spec == BEST:
        path, line = best_checkpoint(checkpoints)
        print(f"[verl-p40] {line}", flush=True)
        return path
    return Path(spec)


def merger_error(stderr: str) -> str:
    """The merger's own reason, in one line: the exception its traceback ends with (or its last line of output)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b:?", line)]
    last = (errors or lines or ["no output"])[-1]
    return last if len(last) <= 300 else last[:297] + "..."


ADAPTER = "lora_adapter"


def verified(folder: Path, fix: str = "") -> Path:
    """`folder`, once `verl_p40.models.verify` finds it usable; else the one line of what is wrong with it."""
    from verl_p40.models import verify

    problems = verify.problems(folder)
    if problems:
        raise UserError(f"{folder}: not a usable model folder: {'; '.join(problems[:3])}{fix}")
    return folder


def run_record(actor: Path) -> dict:
    """The record `verl-p40 train` wrote for the experiment holding `.../global_step_N/actor`."""
    return read_run_record(actor.parent.parent)


def fold(merged: Path, actor: Path, out: Path) -> str:
    """Write `merged`'s base weights plus its adapter, folded in with the run's alpha, to `out`; returns a note."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora = run_record(actor).get("lora")
    if not lora:
        raise UserError(
            f"{actor}: the checkpoint holds a LoRA adapter but {actor.parent.parent}/verl-p40-run.json "
            "does not give its alpha (was it trained without verl-p40 train?); write "
            '{"lora": {"rank": R, "alpha": A}} there'
        )
    adapter = merged / ADAPTER
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    config["lora_alpha"] = lora["alpha"]
    (adapter / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    base = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(merged).save_pretrained(out)
    shutil.copytree(adapter, out / ADAPTER)
    return (
        f"LoRA adapter (rank {config['r']}, alpha {lora['alpha']}) merged into the weights; "
        f"adapter kept in {out / ADAPTER}"
    )


def saved_world_size(experiment: Path) -> tuple[Path, int] | None:
    """(the newest checkpoint's actor folder, how many processes wrote it) under an experiment folder, or None."""
    step, problem = read_tracker(Path(experiment) / TRACKER)
    done = complete_steps(experiment)
    if problem or step not in done:  # the step a resume starts from (resume_line): the newest complete one
        if not done:
            return None
        step = done[-1]
    actor = Path(experiment) / f"global_step_{step}" / "actor"
    sizes = {int(p.name.split("_")[3]) for p in actor.glob("model_world_size_*_rank_*.pt")}
    return (actor, sizes.pop()) if len(sizes) == 1 else None


def check_resume(record: dict) -> None:
    """A run that will resume (resume_mode auto) must have the GPU count its checkpoint was saved with: verl 0.5.0
    loads each rank's own FSDP shard and cannot reshard one."""
    if record.get("resume_mode", "auto") == "disable" or "world_size" not in record:
        return
    saved = saved_world_size(Path(record["checkpoints"]))
    if saved and saved[1] != record["world_size"]:
        actor, size = saved
        raise UserError(
            f"{actor.parent}: saved by {size} GPUs and this run has {record['world_size']}; verl 0.5.0 "
            f"cannot reshard it: resume on {size} GPUs (GPUS / --gpus, NODES / --nodes), or start afresh "
            "with --set trainer.experiment_name=NEW (verl-p40 eval and export read it on any GPU count)"
        )


def finished_run(record: dict) -> str | None:
    """The line saying a run is already finished, when its newest complete checkpoint is at or past the step it ends
    at (None: there is still training to do). verl 0.5.0 would load that checkpoint and train one step past it."""
    steps = record.get("steps")
    if record.get("resume_mode", "auto") != "auto" or not steps:
        return None
    done = complete_steps(Path(record["checkpoints"]))
    if not done or max(done) < int(steps):
        return None
    return (
        f"{record['checkpoints']}: finished, its newest checkpoint is step {max(done)} of {steps}; nothing to train "
        "(for more steps raise trainer.total_training_steps; for a fresh run --set trainer.experiment_name=NEW)"
    )


def write_run_record(record: dict) -> Path:
    """`<checkpoints>/<experiment>/verl-p40-run.json` from a run plan's `record`: how the run's checkpoints were made
    (LoRA's alpha is read back by `fold`). A resumed run must agree with it on what the checkpoints hold."""
    from verl_p40.atomic import write_text

    folder = Path(record["checkpoints"])
    path = folder / RUN_RECORD
    before = read_run_record(folder)  # a damaged one (or one kept aside) is said, never replaced by one without it
    if before:
        # what the trainer keeps in the record (every validation, the best step) outlives the resume
        record = {**record, **{k: before[k] for k in ("validations", "best") if k in before}}
        for key in ("algorithm", "lora"):
            if key in before and before[key] != record[key]:
                raise UserError(
                    f"{folder}: its checkpoints were made with {key} {before[key]!r}, this run has "
                    f"{record[key]!r}; resume with the same settings, or pass "
                    "--set trainer.experiment_name=NEW for a fresh run"
                )
    folder.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, indent=2) + "\n")
    return path
