"""Projected hours of a recipe on 1, 2 and 4 Tesla P40s in the plan's layout (issue 56: the recipe's prompts a step
split over the GPUs): the default run's logged steps (answer lengths, longest prompt and answer, generation time)
priced by `verl_p40.perf.projection` for the p40 plan of each recipe on N cards (each card's share of the sequences,
FSDP's all-gathers and reduce-scatters over PCIe 3.0 x16 at 12 GB/s, the host's per-token generate() overhead as
the run measured it). The epoch's rows are read from the prepped data folder, as the plan counts them.

    python3 bench/multi_gpu_projection.py --log TRAIN_LOG[.gz] --data DATA/gsm8k --out OUT.json   (CPU only)
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

from lib.run_projection import SHARED, project_run
from verl_p40.perf import projection
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import plan
from verl_p40.plan.run_options import RunOptions
from verl_p40.run.trainer_log import read_steps

RECIPES = ("grpo-gsm8k", "ppo-gsm8k")
CARDS = (1, 2, 4)


def steps_of(log: Path) -> list[dict]:
    if log.suffix != ".gz":
        return read_steps(log)
    with tempfile.NamedTemporaryFile("wb", suffix=".log") as plain, gzip.open(log, "rb") as packed:
        shutil.copyfileobj(packed, plain)
        plain.flush()
        return read_steps(plain.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, required=True, help="the default run's trainer log")
    parser.add_argument("--data", type=Path, required=True, help="the prepped GSM8K folder (its train rows)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    steps = [s for s in steps_of(args.log) if "timing_s/update_actor" in s]
    shape = projection.Shape.from_config(json.loads((SHARED / "config.json").read_text()))
    rows = []
    for recipe in RECIPES:
        for cards in CARDS:
            gpus = ",".join(map(str, range(cards)))
            options = RunOptions(profile="p40", algorithm=recipe, gpus=tuple(range(cards)), data=str(args.data))
            run = plan(options, Facts.of_card("p40", cards))
            record = run.record
            command = f"verl-p40 train --profile p40 --algorithm {recipe} --gpus {gpus}"
            # priced with the plan before issue 67's speed-ups (the committed table, docs/multi-gpu.md, says so): on
            # several cards the length-grouped update is offered, not set, and the one-card row compares like with like
            projected = project_run(f"{recipe} on {cards} P40s", command, steps, shape, recent=True, recorded=True)
            step_s = projected["p40_projection"]["step"]
            batches = record["rows"] // record["prompts_per_step"]
            rows.append(
                {
                    "recipe": recipe,
                    "p40s": cards,
                    "prompts_per_step": record["prompts_per_step"],
                    "steps": record["steps"],
                    "epochs": record["epochs"],
                    "rows": record["rows"],
                    "p40_s_per_step": step_s,
                    "p40_phases_s": projected["p40_projection"],
                    "p40_hours_for_the_run": round(step_s * record["steps"] / 3600, 2),
                    "p40_hours_per_epoch": round(step_s * batches / 3600, 2),
                    "command": command,
                }
            )
    one = {r["recipe"]: r["p40_s_per_step"] for r in rows if r["p40s"] == 1}
    for r in rows:
        r["speedup_vs_one_p40"] = round(one[r["recipe"]] / r["p40_s_per_step"], 2)
    result = {"log": str(args.log), "steps_used": len(steps), "method": __doc__.split("\n\n")[0], "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for r in rows:
        print(
            f"{r['recipe']:>10} on {r['p40s']} P40s: {r['prompts_per_step']} prompts a step, {r['steps']} steps, "
            f"{r['p40_s_per_step']:.1f} s a step ({r['speedup_vs_one_p40']:.2f}x), {r['p40_hours_for_the_run']} h for "
            f"the run, {r['p40_hours_per_epoch']} h an epoch of {r['rows']:,} rows"
        )


if __name__ == "__main__":
    main()
