"""The learning bench's held-out phases (bench/learning_run.py): `final` (the picked checkpoint and the base model on
the test split, over several GPUs), `horizon` (the steps named before the run, each against the base), their reports,
`rescore` (a returned result scored again by this checkout) and the work bundle `report --work` redraws from."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import tarfile
import time
from pathlib import Path

from lib.device_runs import mask_env
from lib.learning_recipe import MAX_NEW_TOKENS, MODES, RECIPE
from lib.learning_report import p40_projection, report, trainer_settings
from lib.real_runs import State, cli, run
from verl_p40.patches.p40_run_folder import accuracy_of
from verl_p40.run.trainer_log import read_steps


def bundle(work: Path, out: Path) -> None:
    """learning-work.tgz: what `report --work` redraws everything from (state, logs, the held-out answers)."""
    with tarfile.open(out / "learning-work.tgz", "w:gz") as tar:
        for name in (
            "state.json",
            "logs",
            "eval-final",
            *sorted(p.name for p in work.glob("eval-base*")),
            *sorted(p.name for p in work.glob("eval-step-*")),
        ):
            if (work / name).exists():
                tar.add(work / name, arcname=name, filter=lambda t: None if "/ckpt" in t.name else t)


def parts(data: Path, count: int, limit: int | None) -> list[Path]:
    """The held-out split in `count` parts, one per GPU (the first `limit` rows only, for a smoke check)."""
    import pyarrow.parquet as pq

    table = pq.read_table(data / "test.parquet")
    if limit:
        table = table.slice(0, limit)
        pq.write_table(table, data / "heldout.parquet")
    size = -(-table.num_rows // count)
    paths = [data / f"heldout-{i}.parquet" for i in range(count)]
    for i, path in enumerate(paths):
        pq.write_table(table.slice(i * size, size), path)
    return paths


def validation_accuracy(log: Path) -> dict[int, float]:
    """Step -> the greedy validation accuracy (p40_run_folder.accuracy_of) the trainer logged at that step."""
    return {int(s["step"]): a for s in read_steps(log) if (a := accuracy_of(s)) is not None}


def pick_checkpoint(rule: str, log: Path, ckpt: Path) -> dict:
    """The checkpoint the held-out evaluation scores. `latest`: the last one saved. `best-validation`: among the
    saved steps that were validated, the one of highest validation accuracy (the later on a tie); validation is
    train rows (val.parquet), so the test split still decides nothing before it is scored once."""
    saved = {int(p.name.removeprefix("global_step_")): p / "actor" for p in ckpt.rglob("global_step_*") if p.is_dir()}
    if not saved:
        raise SystemExit(f"{ckpt}: no checkpoint was saved")
    accuracy = validation_accuracy(log)
    candidates = {step: accuracy[step] for step in saved if step in accuracy and step > 0}
    if rule == "latest" or not candidates:
        step = max(saved)
        why = "the last checkpoint" + ("" if rule == "latest" else " (no saved step was validated)")
    else:
        # the highest validation alone: the challenger of the product's `best` (patches/p40_best.py), unpaired here
        from verl_p40.patches.p40_best import challenger_step

        step = challenger_step(accuracy, saved)
        why = f"the highest validation accuracy of the saved steps {sorted(candidates)}"
    return {
        "rule": rule,
        "step": step,
        "path": str(saved[step]),
        "validation_accuracy": accuracy.get(step),
        "why": why,
        "candidates": {str(s): candidates[s] for s in sorted(candidates)},
    }


def final(args: argparse.Namespace, work: Path, out: Path, state: State) -> dict:
    from verl_p40.models.checkpoints import resolve_model

    os.environ.update(mask_env(MODES[state.data.get("mode", args.mode)]["mask"]))
    started = time.time()
    picked = pick_checkpoint(args.pick, work / "logs" / state.data["train_log"], work / "ckpt")
    state.data["evaluated_checkpoint"] = picked
    state.save(out)
    print(f"[learning_run] evaluating step {picked['step']}: {picked['why']}", flush=True)
    trained = resolve_model(picked["path"], work / "ckpt")  # merged once, before several processes would all try
    base, data = work / "qwen-real", work / "gsm8k"
    common = [
        "--model",
        str(base),
        "--compare",
        str(trained),
        "--dtype",
        "fp32",
        "--max-new-tokens",
        str(MAX_NEW_TOKENS),
        "--batch-size",
        str(args.eval_batch),
        "--logs",
        str(work / "logs"),
    ]
    procs, commands = [], []
    pieces = parts(data, args.eval_gpus, args.heldout_limit)
    for gpu, part in enumerate(pieces):
        command = cli("eval", *common, "--data", str(part), "--out", str(work / f"eval-{part.stem}"))
        commands.append(f"CUDA_VISIBLE_DEVICES={gpu} verl-p40 " + shlex.join(command[3:]))
        print("$ " + commands[-1], flush=True)
        procs.append(subprocess.Popen(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}))
    if any(p.wait() for p in procs):
        raise SystemExit("an evaluation failed (output above)")
    whole = work / "eval-final"
    whole.mkdir(exist_ok=True)
    with open(whole / "answers.jsonl", "w", encoding="utf-8") as handle:
        for part in pieces:
            handle.write((work / f"eval-{part.stem}" / "answers.jsonl").read_text(encoding="utf-8"))
    heldout = data / ("heldout.parquet" if args.heldout_limit else "test.parquet")
    command = cli("eval", *common, "--data", str(heldout), "--out", str(whole))
    run(command)  # every answer is there already: it only scores and reports
    commands.append("verl-p40 " + shlex.join(command[3:]))
    state.data["final_eval"] = {"commands": commands, "wall_s": round(time.time() - started, 1), "gpus": args.eval_gpus}
    state.save(out)
    result = report(work, out, state)
    bundle(work, out)
    return result


def horizon(args: argparse.Namespace, work: Path, out: Path, state: State) -> dict:
    """The run scored on the whole test split at the steps named before it (--score-steps: no pick among them), each
    against the base model's answers (evaluated once) with the paired sign test, against prompts seen and the P40
    hours the run's own steps project to: horizon-<date>.json and .png. Each checkpoint is merged by the product and
    scored by `verl-p40 eval` alone; the pairs are read back from the answers files (no model, no GPU)."""
    from verl_p40.models.checkpoints import resolve_model

    os.environ.update(mask_env(MODES[state.data.get("mode", args.mode)]["mask"]))
    steps = [int(s) for s in args.score_steps.split(",")]
    saved = {int(p.name.removeprefix("global_step_")): p / "actor" for p in (work / "ckpt").rglob("global_step_*")}
    missing = [s for s in steps if s not in saved]
    if missing:
        raise SystemExit(f"steps {missing} were named but not saved (saved: {sorted(saved)})")
    common = ["--data", str(work / "gsm8k" / "test.parquet"), "--dtype", "fp32"]
    common += ["--max-new-tokens", str(MAX_NEW_TOKENS), "--batch-size", str(args.eval_batch)]
    commands, started = [], time.time()
    for name, model in [("base", work / "qwen-real"), *((f"step-{s}", saved[s]) for s in steps)]:
        if (work / f"eval-{name}" / "report.json").is_file():
            continue  # scored by an earlier call of this session
        model = resolve_model(str(model), work / "ckpt") if name != "base" else model
        command = cli("eval", "--model", str(model), *common, "--out", str(work / f"eval-{name}"))
        commands.append("verl-p40 " + shlex.join(command[3:]))
        print("$ " + commands[-1], flush=True)
        run(command)
    state.data.setdefault("horizon_commands", []).extend(commands)
    state.data["horizon_wall_s"] = state.data.get("horizon_wall_s", 0) + round(time.time() - started, 1)
    state.save(out)
    result = horizon_report(work, out, state, steps)
    bundle(work, out)
    return result


def scored(folder: Path) -> dict[int, dict]:
    """Question index -> the one model's scores in an eval folder's answers.jsonl."""
    from verl_p40.evaluation import answers

    return {i: record["models"]["base"] for i, (_, record) in answers.read(folder / answers.ANSWERS).items()}


def horizon_report(work: Path, out: Path, state: State, steps: list[int]) -> dict:
    from verl_p40.evaluation import evaluate

    base = scored(work / "eval-base")
    log = work / "logs" / state.data["train_log"]
    setting = trainer_settings(log)
    prompts = int(setting["data.train_batch_size"])
    projection = p40_projection(
        state.data.get("mode", "p40"),
        [s for s in read_steps(log) if "timing_s/step" in s],
        work,
        state.data.get("algorithm", RECIPE),
        setting,
        state.data.get("train_command"),
    )
    p40_step = projection.get("p40_s_per_step")
    rows = []
    for step in steps:
        trained = scored(work / f"eval-step-{step}")
        if set(trained) != set(base):
            raise SystemExit(f"step {step} and the base answered different questions")
        records = [{"models": {"base": base[i], "trained": trained[i]}} for i in sorted(base)]
        summary = evaluate.summarise(records, ["base", "trained"])
        rows.append(
            {
                "step": step,
                "prompts_seen": step * prompts,
                "p40_hours": round(step * p40_step / 3600, 2) if p40_step else None,
                "accuracy": summary["trained"],
                "against_base": evaluate.paired_differences(records, "base", "trained"),
            }
        )
    result = {
        "what": "the run scored on the whole test split at the steps named before it (no pick), fp32, greedy, "
        f"{MAX_NEW_TOKENS} new tokens, each step's answers paired with the base model's (sign test)",
        "mode": state.data.get("mode"),
        "torch": state.data.get("torch"),
        "train_command": state.data.get("train_command"),
        "eval_commands": state.data.get("horizon_commands"),
        "base": evaluate.summarise([{"models": {"base": base[i]}} for i in sorted(base)], ["base"])["base"],
        "steps": rows,
        "prompts_per_step": prompts,
        "p40_step_s": p40_step,
        "gpu_minutes_scoring": round(state.data.get("horizon_wall_s", 0) / 60, 2),
    }
    stamp = time.strftime("%Y-%m-%d")
    (out / f"horizon-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot_horizon(result, out / f"horizon-{stamp}.png")
    return result


def plot_horizon(result: dict, path: Path) -> None:
    """Flexible accuracy on the test split at each scored step against prompts seen (and P40 hours above)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["steps"]
    x = [0] + [r["prompts_seen"] for r in rows]
    y = [100 * result["base"]["accuracy_flexible"]] + [100 * r["accuracy"]["accuracy_flexible"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, y, marker="o")
    for r, yy in zip(rows, y[1:]):
        ax.annotate(f"p={r['against_base']['flexible']['p_value']:.2g}", (r["prompts_seen"], yy), fontsize=8)
    ax.set_xlabel("prompts seen")
    ax.set_ylabel("test split, flexible accuracy (%)")
    ax.set_title("the run scored at steps named before it (no pick)", pad=30)
    if result.get("p40_step_s"):
        hours_a_prompt = result["p40_step_s"] / result["prompts_per_step"] / 3600
        top = ax.secondary_xaxis("top", functions=(lambda v: v * hours_a_prompt, lambda h: h / hours_a_prompt))
        top.set_xlabel("P40 hours (projected)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rescore(work: Path) -> None:
    """eval-final's report.json and report.md scored again from its answers.jsonl with this checkout's scoring and
    statistics (no model, no GPU): for a result returned by a device call before a fix to either."""
    from verl_p40.evaluation import answers, evaluate

    final_dir = work / "eval-final"
    old = json.loads((final_dir / "report.json").read_text())
    labels = list(old["models"])
    records = [record for _, (_, record) in sorted(answers.read(final_dir / answers.ANSWERS).items())]
    summary = evaluate.summarise(records, labels)
    comparison = evaluate.paired_differences(records, *labels) if len(labels) == 2 else None
    paths = {label: old["models"][label]["path"] for label in labels}
    new = {**old, "models": {label: {"path": paths[label], **summary[label]} for label in labels}}
    new["comparison"] = comparison
    (final_dir / "report.json").write_text(json.dumps(new, indent=2) + "\n")
    markdown = evaluate.markdown(summary, records, labels, 10, paths, bool(old.get("curves")), old["dtype"], comparison)
    (final_dir / "report.md").write_text(markdown)
