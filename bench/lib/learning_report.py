"""The learning bench's reports (bench/learning_run.py, no GPU): `report` (learning-<date>.json and .png from the run's
work folder), the P40 projection of the run's steps, and `compare` (several runs' validation curves on one axis)."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
import shutil
import statistics
import time
from pathlib import Path

from lib.learning_recipe import MODES, RECIPE, VAL_SIZE, train_command
from lib.real_runs import State, monitor_peaks
from verl_p40 import UserError
from verl_p40.patches.p40_run_folder import accuracy_of, validation_metrics
from verl_p40.plan.workload import Workload
from verl_p40.run.trainer_log import read_steps


def report(work: Path, out: Path, state: State) -> dict:
    data = state.data
    evaluated = (work / "eval-final" / "report.json").is_file()
    evaluation = json.loads((work / "eval-final" / "report.json").read_text()) if evaluated else None
    log = work / "logs" / data["train_log"]
    steps = [s for s in read_steps(log) if "timing_s/step" in s]  # step 0 is validation only
    validated = [s for s in read_steps(log) if accuracy_of(s) is not None]
    setting = trainer_settings(log)
    run = Workload.of(nested(setting))
    gpus, per_step = run.gpus, int(setting["data.train_batch_size"]) * run.samples
    sequences = len(steps) * per_step
    train_minutes = data["wall_s"] / 60
    eval_minutes = data.get("final_eval", {}).get("wall_s", 0) / 60
    step_s = [s["timing_s/step"] for s in steps]
    mode = data.get("mode", "p40")
    gpu_name = data.get("gpu_name", "NVIDIA H200")
    eval_gpus = data.get("final_eval", {}).get("gpus", 1)
    algorithm = data.get("algorithm", RECIPE)
    projected = p40_projection(mode, steps, work, algorithm, setting, data.get("train_command"))
    trained_s = dict(zip((int(s["step"]) for s in steps), itertools.accumulate(step_s)))
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "mode": mode,
        "torch": data.get("torch"),
        "recipe": algorithm,
        "setup": f"{gpus} x {gpu_name}, {MODES[mode]['setup']}; real-weights proxy Qwen2.5-Coder-0.5B-Instruct "
        "(Qwen2.5-0.5B-Instruct's shape, Qwen2.5 tokenizer)",
        "commands": {
            "prep": data.get("prep_command"),
            "train": data.get("train_command"),
            "eval": data.get("final_eval", {}).get("commands"),
        },
        "held_out": _held_out(evaluation),
        "eval": evaluation["models"] if evaluation else None,
        "comparison": evaluation["comparison"] if evaluation else None,
        "training": _training(data, steps, setting, gpus, per_step),
        "gpu_minutes": {
            "train": round(gpus * train_minutes, 2),
            "final_eval": round(eval_gpus * eval_minutes, 2),
            "note": "wall minutes x GPUs; the trainer's start-up and validation included",
        },
        "rollouts_per_gpu_minute": round(sequences / (gpus * train_minutes), 1) if train_minutes else None,
        "p40_projection": projected,
        "validation": _validation(validated, setting, gpus, trained_s, projected),
        "memory": monitor_peaks(work / "logs" / "gpu", 24.0 if mode == "p40" else None),
    }
    stamp = result["date"]
    (out / f"learning-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ("report.md", "report.json") if evaluated else ():
        shutil.copy(work / "eval-final" / name, out / f"learning-eval-{name}")
    plot(read_steps(log), out / f"learning-{stamp}.png", int(setting["data.train_batch_size"]))
    return result


def _held_out(evaluation: dict | None) -> dict | str:
    """The report's held_out entry: the test questions the final evaluation scored, or why there are none."""
    if not evaluation:
        return "not evaluated: this run gives its validation curve only (session --no-eval)"
    return {
        "questions": evaluation["questions"],
        "split": f"GSM8K test, the first {evaluation['questions']} of 1,319 (validation: val.parquet, "
        f"{VAL_SIZE} train rows)",
        "dtype": evaluation["dtype"],
        "greedy": True,
        "max_new_tokens": evaluation["max_new_tokens"],
    }


def _training(data: dict, steps: list[dict], setting: dict[str, str], gpus: int, per_step: int) -> dict:
    """The report's training entry: steps, how the run stopped, prompts and rollouts, checkpoints."""
    step_s = [s["timing_s/step"] for s in steps]
    return {
        "steps": len(steps),
        "stop": {"returncode": data.get("returncode"), "sigterm_at_s": data.get("stop_sent_at_s")},
        "prompts_per_step": int(setting["data.train_batch_size"]),
        "sequences_per_step": per_step,
        "prompts_seen": len(steps) * int(setting["data.train_batch_size"]),
        "rollouts": len(steps) * per_step,
        "gpus": gpus,
        "median_step_s": round(statistics.median(step_s), 2) if step_s else None,
        "wall_s": data["wall_s"],
        "checkpoints": data.get("checkpoints"),
        "evaluated_checkpoint": data.get("evaluated_checkpoint"),
        "prompts_seen_by_evaluated": (data.get("evaluated_checkpoint") or {}).get("step", len(steps))
        * int(setting["data.train_batch_size"]),
    }


def _validation(
    validated: list[dict], setting: dict[str, str], gpus: int, trained_s: dict[int, float], projected: dict
) -> list[dict]:
    """The report's validation entries: each validated step's scores, with the prompts, GPU-minutes and P40 hours
    before it."""
    return [
        {
            "step": int(s["step"]),
            "prompts_seen": int(s["step"]) * int(setting["data.train_batch_size"]),
            # GPU-minutes of the training steps before it (start-up and validation left out: the same for any
            # recipe), and the P40 hours the same steps project to
            "train_gpu_minutes": round(gpus * trained_s.get(int(s["step"]), 0.0) / 60, 2),
            "p40_hours": round(int(s["step"]) * projected["p40_s_per_step"] / 3600, 3)
            if projected.get("p40_s_per_step")
            else None,
            **validation_metrics(s),
        }
        for s in validated
    ]


def recipe_overrides(recorded: str | None) -> list[str]:
    """The verl keys the run's own `verl-p40 train` command set that change the recipe (a variant's change:
    `use_kl_loss=false` drops the reference pass), which its projected p40 config repeats. Left out: the schedule
    (`trainer.*`, from the run's settings) and the sizes and offloads the memory plan chooses for a card (the fast
    mode's hand-set sizes for an H200 before the plan existed, which a P40 cannot hold). Not carried: the train
    command's own flags (`--samples-per-prompt`, `--lora-rank`, `--batch`, the reward's): no learning run sets one."""
    from verl_p40.plan.memory_plan import KEYS, STATE_KEYS

    planned = {key for keys in KEYS.values() for key in keys} | set(STATE_KEYS.values())
    words = [w.removeprefix("--set=") for w in shlex.split(recorded or "")]
    keys = {w: w.split("=", 1)[0].lstrip("+") for w in words if "=" in w and w[0] != "-"}
    return [word for word, key in keys.items() if not key.startswith("trainer.") and key not in planned]


def _projection_source(mode: str, priced_at: str) -> str:
    """How p40_projection priced the run's steps, in words for its record."""
    passes = (
        "the tokens this run's passes logged (perf/p40_tokens: its own micro-batches, larger than a P40's, so padded "
        "more: if anything long)"
        if priced_at == "the tokens each pass logged"
        else "this run's longest sequences (it logged no pass tokens)"
    )
    generation = (
        "its generation time is the masked run's own (the p40 plan's chunks)"
        if mode == "p40"
        else "its generation time from this run's (unmasked, one 256-answer batch) is a lower bound"
    )
    recipe = "bench/project.py: the p40 profile's config of the recipe and the run's own recipe keys"
    return f"{recipe}, each pass at {passes}; {generation}"


def p40_projection(
    mode: str,
    steps: list[dict],
    work: Path,
    algorithm: str = RECIPE,
    setting: dict[str, str] | None = None,
    recorded: str | None = None,
) -> dict:
    """What the run's steps would take on one Tesla P40: bench/project.py's projection of the recipe as the p40
    profile runs it, at this run's logged answer lengths and phase times. `setting`: the run's trainer overrides
    (trainer_settings), whose schedule (steps, validation, saves) the projected config repeats; `recorded`: the
    run's recorded train command, whose own verl keys (recipe_overrides) the projected config repeats."""
    setting = setting or {}
    if not steps:
        return {"note": "no training step was logged: nothing to project"}
    from lib import run_projection as project
    from verl_p40.perf import projection

    config = work / "qwen-real" / "config.json"
    config = config if config.is_file() else project.SHARED / "config.json"
    shape = projection.Shape.from_config(json.loads(config.read_text()))
    command = "verl-p40 " + shlex.join(
        train_command(
            argparse.Namespace(
                mode="p40",
                test_freq=setting.get("trainer.test_freq", -1),
                save_freq=setting.get("trainer.save_freq", -1),
                steps=setting.get("trainer.total_training_steps", len(steps)),
                override=recipe_overrides(recorded),
                algorithm=algorithm,
            ),
            work,
        )[3:]
    )
    try:
        row = project.project_run(f"{mode} run as the p40 profile", command, steps, shape, recent=True, measured=True)
    except UserError as refused:  # a setting the run carried that a P40 cannot plan: the run's results stand
        return {"note": f"not projected: the p40 profile cannot plan this run's settings ({refused})"}
    step_s = row["p40_projection"]["step"]
    source = _projection_source(mode, row["priced_at"])
    return {
        "p40_s_per_step": step_s,
        "p40_hours_per_gsm8k_epoch": row["p40_hours_per_gsm8k_epoch"],
        "p40_hours_for_this_run": round(step_s * len(steps) / 3600, 2),
        "projected_config": command,
        "source": source,
    }


def trainer_settings(log: Path) -> dict[str, str]:
    """The verl overrides the run was started with: the first line of verl-p40's train log is the trainer command."""
    first = log.read_text(errors="replace").splitlines()[0]
    return dict(word.lstrip("+").split("=", 1) for word in shlex.split(first.removeprefix("$ ")) if "=" in word)


def nested(setting: dict[str, str]) -> dict:
    """The run's dotted overrides as the nested config Workload.of reads (`a.b=1` -> {"a": {"b": "1"}})."""
    tree: dict = {}
    for key, value in setting.items():
        *parents, leaf = key.split(".")
        node: object = tree
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[leaf] = value
    return tree


def standard_error(accuracy: float, questions: int = VAL_SIZE) -> float:
    share = max(min(accuracy, 1.0), 0.0)
    return math.sqrt(share * (1 - share) / questions)


def plot(steps: list[dict], path: Path, prompts_per_step: int | None = None) -> None:
    """Training reward, validation reward (with its standard error), actor entropy, response length; against prompts
    seen when the run's prompts a step are known (runs of other batches compare on that axis), else against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = prompts_per_step or 1

    def series(key: str) -> tuple[list[float], list[float]]:
        pairs = [(s["step"] * scale, s[key]) for s in steps if key in s]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    x, y = series("critic/score/mean")
    axes[0].plot(x, y, marker=".", alpha=0.5, label="reward (the recipe's)")
    for key, label in (
        ("reward/flexible/mean", "correct, last number"),
        ("reward/strict/mean", "correct, '#### N'"),
        ("reward/format/mean", "'#### N' used"),
    ):
        x, y = series(key)
        if len(y) >= 5:
            y = [statistics.mean(y[max(0, i - 4) : i + 1]) for i in range(len(y))]
        if y:
            axes[0].plot(x, y, label=label + (" (mean of last 5)" if len(y) >= 5 else ""))
    axes[0].set_title("training answers (sampled)")
    val = sorted((s["step"] * scale, a) for s in steps if (a := accuracy_of(s)) is not None)
    if val:
        error = [standard_error(v) for _, v in val]
        axes[1].errorbar(
            [v[0] for v in val],
            [v[1] for v in val],
            yerr=error,
            marker="o",
            capsize=3,
            label=f"\u00b11 standard error ({VAL_SIZE} questions)",
        )
    axes[1].set_title("validation accuracy, greedy (val.parquet: train rows)")
    x, y = series("actor/entropy")
    axes[2].plot(x, y, marker=".", color="tab:green")
    axes[2].set_title("actor entropy")
    x, y = series("response_length/mean")
    axes[3].plot(x, y, marker=".", label="mean")
    x, y = series("response_length/clip_ratio")
    if y:
        clip = axes[3].twinx()
        clip.plot(x, y, marker=".", color="tab:red", label="share cut at the limit")
        clip.set_ylim(0, 1)
    axes[3].set_title("response length (tokens) and share cut at the limit")
    for ax in axes:
        ax.set_xlabel(f"prompts seen ({prompts_per_step} a step)" if prompts_per_step else "step")
        if not any(len(line.get_xdata()) for line in ax.lines) and not ax.containers:
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", color="grey")
    for ax in axes[:2]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


AXES = {
    "prompts": ("prompts_seen", "prompts seen"),
    "gpu-minutes": ("train_gpu_minutes", "GPU-minutes of training steps"),
    "p40-hours": ("p40_hours", "P40 hours (projected)"),
}


def compare(records: list[Path], path: Path, axis: str = "prompts") -> str:
    """The validation curves of several runs (learning-<date>.json) on one plot against prompts seen, the GPU-minutes
    of their training steps or their projected P40 hours (`axis`), each point with its standard error, and the same
    as a markdown table (one row per value on the axis, one column per run)."""
    key, title = AXES[axis]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {}
    for record in records:
        result = json.loads(record.read_text())
        per_step = result["training"]["prompts_per_step"]
        label = f"{record.parent.name} ({result.get('recipe', RECIPE)}, {result['mode']}, {per_step} prompts a step)"
        points = {}
        for v in result["validation"]:
            x = v.get(key, v["step"] * per_step if key == "prompts_seen" else None)
            if x is None:
                raise SystemExit(f"{record}: its validation has no {key} (a record from before it: report it again)")
            points[x] = accuracy_of(v)
        curves[label] = points
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, curve in curves.items():
        x = sorted(curve)
        ax.errorbar(
            x, [curve[p] for p in x], yerr=[standard_error(curve[p]) for p in x], marker="o", capsize=3, label=label
        )
    ax.set_xlabel(title)
    ax.set_ylabel("validation accuracy, greedy")
    ax.set_title(f"validation accuracy ({VAL_SIZE} train rows held out; bars: \u00b11 standard error)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    seen = sorted({p for curve in curves.values() for p in curve})
    lines = [f"| {title} | " + " | ".join(curves) + " |", "| --- |" + " --- |" * len(curves)]
    for p in seen:
        cells = [f"{curves[label][p] * 100:.1f} %" if p in curves[label] else "" for label in curves]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
