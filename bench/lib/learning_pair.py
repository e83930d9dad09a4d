"""Issue 69's two-trainer measurement (`learning_run.py pair`): two trainers of the recipe on one GPU with the same
memory cap, first together (each its own Ray instance: neither joins a cluster, so `ray.init` starts one per trainer,
with ports of its own) and then the same two in a row; the pair's wall time against the two in a row, each trainer's
median step and its update's allocator peak, from logs on one machine.

Together runs first: if anything it pays the cold start (caches, the first CUDA context), so a pair that comes out
faster is not an artefact of the order. Each trainer has folders of its own for every round (the run lock is per
checkpoints folder, and a second round must not resume the first's run); nothing is validated or saved, so the wall
time is start-up plus the steps."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import time
from pathlib import Path

from lib.learning_recipe import UNVALIDATED_UNSAVED, recipe_command
from lib.real_runs import ray_stop
from verl_p40.perf.bench import phase_peaks_gb
from verl_p40.perf.projection import median_phases
from verl_p40.run.trainer_log import read_steps

TRAINERS = ("a", "b")
ROUNDS = ("together", "in-a-row")
POLL_S = 1.0  # how often a round looks at its trainers
GPU_MARGIN_GB = 2  # left beside the two caps: the CUDA contexts and allocator slack outside each trainer's cap


def pair_cap_gb(total_mib: int) -> int:
    """The one cap both trainers get: half the GPU's memory less the margin, whole GB (37 on an 80 GB H100)."""
    return int(total_mib / 1024 / 2 - GPU_MARGIN_GB)


def pair_command(args: argparse.Namespace, work: Path, cap_gb: int, folder: Path) -> list[str]:
    """One trainer of the pair: the mode's recipe for --steps steps at the shared cap, not validated or saved, into
    `folder`."""
    run_sets = [*UNVALIDATED_UNSAVED, f"trainer.total_training_steps={args.steps}"]
    flags = ("--gpu-memory-cap-gb", str(cap_gb))
    return recipe_command(args, work, folder / "ckpt", folder / "logs", run_sets, flags)


def _own_ray_env() -> dict[str, str]:
    """The trainer's environment without a cluster address: `ray.init` in verl's main_ppo starts a local instance of
    its own (ports chosen free) instead of joining one."""
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def _run_round(commands: dict[str, list[str]], together: bool, deadline: float) -> dict[str, dict]:
    """Each trainer's exit code and wall time (its start to its exit); in a row, one after the other. A trainer still
    running at the deadline gets one SIGTERM (its graceful stop) and is said to be stopped."""
    results: dict[str, dict] = {}
    groups = [list(commands)] if together else [[name] for name in commands]
    for group in groups:
        ray_stop()  # nothing of an earlier trainer left; never during a round: it would stop the other trainer's Ray
        running = {}
        for name in group:
            print("$ " + shlex.join(commands[name]), flush=True)
            running[name] = (subprocess.Popen(commands[name], env=_own_ray_env()), time.time())
        while running:
            time.sleep(POLL_S)
            for name, (proc, started) in list(running.items()):
                if proc.poll() is not None:
                    results[name] = {
                        "returncode": proc.returncode,
                        "stopped_by_budget": results.get(name, {}).get("stopped_by_budget", False),
                        "wall_s": round(time.time() - started, 1),
                    }
                    del running[name]
                elif time.time() > deadline and name not in results:
                    print(f"[pair] {name}: the budget ran out: SIGTERM", flush=True)
                    proc.send_signal(signal.SIGTERM)
                    results[name] = {"stopped_by_budget": True}
    return results


def trainer_steps(logs: Path) -> list[dict]:
    """A trainer's timed steps from its own log (its newest train-*.log in `logs`); none when it wrote no log."""
    found = sorted(logs.glob("train-*.log"))
    return [s for s in read_steps(found[-1]) if "timing_s/step" in s] if found else []


def trainer_summary(steps: list[dict]) -> dict:
    """A finished trainer's steps: how many, the median step, their sum and the update's allocator peak (GB of 1e9
    bytes, from perf/peak_allocated_gb/update_actor)."""
    timings = [s["timing_s/step"] for s in steps]
    return {
        "steps": len(steps),
        "median_step_s": round(statistics.median(timings), 2) if timings else None,
        "steps_s": round(sum(timings), 1),
        "update_peak_gb": phase_peaks_gb(steps).get("update_actor"),
    }


def summarise(rounds: dict[str, dict], cap_gb: int, gpu: str, steps: int) -> dict:
    """The pair's wall time against the two in a row (each round's from its first trainer's start to its last one's
    end; in a row, the Ray clean-up between the two included), and what each trainer did, read from its own log."""
    out: dict = {"gpu": gpu, "cap_gb_each": cap_gb, "steps_each": steps, "rounds": rounds}
    together, in_row = rounds.get("together"), rounds.get("in-a-row")

    def done(trainer: dict) -> bool:
        return trainer["returncode"] == 0 and not trainer["stopped_by_budget"] and trainer["steps"] == steps

    complete = all(r and all(done(t) for t in r["trainers"].values()) for r in (together, in_row))
    out["complete"] = complete
    if together and in_row:
        out["together_wall_s"] = together["wall_s"]
        out["in_a_row_wall_s"] = in_row["wall_s"]
        out["speedup"] = round(in_row["wall_s"] / together["wall_s"], 3) if together["wall_s"] else None
        # the steps alone, start-up left out (what a longer run tends to): in a row they add up, together they overlap
        overlapped = max(t["steps_s"] for t in together["trainers"].values())
        in_row_steps = sum(t["steps_s"] for t in in_row["trainers"].values())
        out["steps_speedup"] = round(in_row_steps / overlapped, 3) if overlapped else None
        if not complete:
            out["verdict"] = "incomplete: a trainer failed, stopped early or trained fewer steps (no verdict)"
        elif out["speedup"] and out["speedup"] > 1:
            out["verdict"] = (
                f"the pair is faster than the same two in a row at {cap_gb} GB each "
                "(one trainer with the whole GPU, whose plan may give it larger micro-batches, is not measured here)"
            )
        else:
            out["verdict"] = "the pair is not faster: run the variants one at a time"
    return out


def first_gpu() -> tuple[int, str]:
    """The first GPU's memory (MiB) and name, as nvidia-smi says them."""
    said = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total,name", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total, name = said.strip().split(",", 1)
    return int(total), name.strip()


def pair(args: argparse.Namespace, work: Path, out: Path, gpu_total_mib: int, gpu: str) -> dict:
    """Both rounds under --budget-s, then pair-<date>.json in `out` (each trainer's log copied beside it)."""
    if args.mode != "fast":
        raise SystemExit("pair: the two-trainer measurement is of the unmasked fast path: --mode fast (issue 69)")
    cap = args.pair_cap_gb or pair_cap_gb(gpu_total_mib)
    deadline = time.time() + args.budget_s
    rounds: dict[str, dict] = {}
    for round_name in ROUNDS:
        folders = {name: work / "pair" / f"{round_name}-{name}" for name in TRAINERS}
        commands = {name: pair_command(args, work, cap, folder) for name, folder in folders.items()}
        started = time.time()
        results = _run_round(commands, round_name == "together", deadline)
        ended = time.time()
        ray_stop()
        trainers = {}
        for name, result in results.items():
            trainers[name] = {
                **result,
                **trainer_summary(trainer_steps(folders[name] / "logs")),
                "command": "verl-p40 " + shlex.join(commands[name][3:]),
            }
            log_out = out / "pair-logs" / f"{round_name}-{name}"
            log_out.mkdir(parents=True, exist_ok=True)
            for log in (folders[name] / "logs").glob("train-*.log"):
                (log_out / log.name).write_bytes(log.read_bytes())
        rounds[round_name] = {"wall_s": round(ended - started, 1), "trainers": trainers}
    result = {"date": time.strftime("%Y-%m-%d"), **summarise(rounds, cap, gpu, args.steps)}
    saved = out / f"pair-{result['date']}.json"
    saved.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=1), flush=True)
    pair_report(saved)
    return result


STEP_PHASES = ("step", "gen", "old_log_prob", "ref", "update_actor")  # verl's timing_s/<phase> the report shows


def pair_report(saved: Path) -> dict:
    """A pair's record redrawn from its JSON and the trainers' logs beside it (pair-logs/<round>-<name>/, as `pair`
    copies them): each trainer read again from its log by this code, the summary again, then <record>.md (a table
    of each phase's median over the steps after the first, verl_p40's median_phases) and <record>.png (every
    trainer's step times). Returns the summary."""
    try:
        result = json.loads(saved.read_text())
    except json.JSONDecodeError as err:
        raise SystemExit(f"{saved}: not JSON ({err}); name a pair-<date>.json from `pair`") from None
    if not isinstance(result, dict) or "rounds" not in result:
        raise SystemExit(f"{saved}: not a pair record (no 'rounds'); name a pair-<date>.json from `pair`")
    rounds, steps_of = {}, {}
    for round_name, round_ in result["rounds"].items():
        trainers = {}
        for name, trainer in round_["trainers"].items():
            steps_of[round_name, name] = trainer_steps(saved.parent / "pair-logs" / f"{round_name}-{name}")
            trainers[name] = {**trainer, **trainer_summary(steps_of[round_name, name])}
        rounds[round_name] = {**round_, "trainers": trainers}
    summary = {"date": result["date"], **summarise(rounds, result["cap_gb_each"], result["gpu"], result["steps_each"])}
    rows = [
        "| round | round's wall (s) | trainer | steps | "
        + " | ".join(f"{p} (s)" for p in STEP_PHASES)
        + " | the steps' sum (s) | update's peak (GB) |",
        "|" + " --- |" * (6 + len(STEP_PHASES)),
    ]
    for round_name, round_ in rounds.items():
        for name, t in round_["trainers"].items():
            medians = median_phases(steps_of[round_name, name])
            phases = [f"{medians[p]:.2f}" if p in medians else "-" for p in STEP_PHASES]
            rows.append(
                f"| {round_name} | {round_['wall_s']} | {name} | {t['steps']} | "
                + " | ".join(phases)
                + f" | {t['steps_s']} | {t['update_peak_gb']} |"
            )
    rows += [
        "",
        "Each phase: the median over the steps after the first (the first warms up).",
        f"{summary['gpu']}, {summary['cap_gb_each']} GB cap each, {summary['steps_each']} steps each: the pair "
        f"{summary.get('together_wall_s')} s, in a row {summary.get('in_a_row_wall_s')} s, {summary.get('speedup')}x; "
        f"the steps alone (start-up left out) {summary.get('steps_speedup')}x. "
        f"Verdict: {summary.get('verdict', 'none')}",
    ]
    saved.with_suffix(".md").write_text("\n".join(rows) + "\n")
    _plot_steps(saved, summary, steps_of)
    return summary


def _plot_steps(saved: Path, summary: dict, steps_of: dict[tuple[str, str], list[dict]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    for (round_name, name), steps in steps_of.items():
        ax.plot(
            [s["step"] for s in steps],
            [s["timing_s/step"] for s in steps],
            marker="o" if round_name == "together" else "s",
            linestyle="-" if round_name == "together" else "--",
            label=f"{round_name}, trainer {name} (round {summary['rounds'][round_name]['wall_s']} s)",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"two trainers on one {summary['gpu']}, {summary['cap_gb_each']} GB each: the pair "
        f"{summary.get('speedup')}x the two in a row\n(wall time, start-up included; "
        f"{summary.get('steps_speedup')}x on the steps alone)",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(saved.with_suffix(".png"), dpi=110)
    plt.close(fig)
