"""The one P40 time figure: the default run (config/algorithms/grpo-gsm8k.yaml) on one P40, its steps at the P40
projection corrected by the masked calibrations, plus its validations and saves, with the band. README.md,
README.zh-CN.md, docs and docker-compose.yml quote this file (tests/cli/test_numbers.py holds them to it).

    PYTHONPATH=bench:app python3 bench/p40_time.py --out bench/results/p40-time-adopted-2026-12-06/p40-time.json

CPU only; reads committed results only:
- the step: the real-weights stand-in's P40 projection with the speed-ups the p40 plan sets since issue 67
  (p40-path-compact-2026-12-06/p40-path-compact.json, 20 masked steps, each pass at its own tokens) and its band from
  the masked calibrations (a projection_band.py band.json, the figure named --figure); with every answer at the
  512-token limit (random weights), the same band file's figure named --limit-figure (pair67-grouped-2026-12-08's
  `grouped`: the path the p40 plan sets since 2026-12-07, measured masked beside the path before issue 67 on one
  machine);
- a validation: verl-p40 validates the 256 held-out rows at the step's generation width, one answer each, and on the
  masked P40 path a validation took what the step's generation took (p40-path-2026-12-04/session.log, verl's
  timing_s/testing against timing_s/gen): priced at the stand-in's P40 generation phase;
- a save: the longest checkpoint save of that run (timing_s/save_checkpoint, disk-bound, not a GPU figure);
- how many of each: the recipe's steps, a validation before training and every VALIDATION_EVERY steps (and at the
  last), a save at the same steps after step 0 (plan/steps.py; run/progress.py counts them).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import yaml

from verl_p40.plan.paths import VALIDATION_EVERY
from verl_p40.run.progress import events_left

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
RECIPE = REPO / "config" / "algorithms" / "grpo-gsm8k.yaml"
STEP_RESULT = RESULTS / "p40-path-compact-2026-12-06" / "p40-path-compact.json"
BAND = RESULTS / "pair67-grouped-2026-12-08" / "band.json"
FIGURE = "real-weights stand-in (p40-path-compact-2026-12-06)"
LIMIT_FIGURE = "pair67-grouped-2026-12-08/grouped.json (P40 projection)"
RUN_LOG = RESULTS / "p40-path-2026-12-04" / "session.log"
COMMAND = "PYTHONPATH=bench:app python3 bench/p40_time.py --out bench/results/p40-time-adopted-2026-12-06/p40-time.json"


def _named(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RESULTS))
    except ValueError:
        return str(path)


def logged(log: str, key: str) -> list[float]:
    """Every value of verl's metric `key` in a training log (`key:VALUE` in its step lines)."""
    return [float(v) for v in re.findall(rf"{re.escape(key)}:([0-9.]+)", log)]


def run_hours(steps: int, step_s: float, validations: int, validation_s: float, saves: int, save_s: float) -> float:
    return round((steps * step_s + validations * validation_s + saves * save_s) / 3600, 2)


def p40_time(recipe: Path, step_result: Path, band_file: Path, figure: str, limit_figure: str, run_log: Path) -> dict:
    steps = int(yaml.safe_load(recipe.read_text(encoding="utf-8"))["verl"]["trainer"]["total_training_steps"])
    validations = 1 + events_left(0, steps, VALIDATION_EVERY)  # val_before_train, then every N and the last
    saves = events_left(0, steps, VALIDATION_EVERY)
    projected = json.loads(step_result.read_text(encoding="utf-8"))["p40_projection"]
    bands = json.loads(band_file.read_text(encoding="utf-8"))["bands"]
    step, limit = bands[figure], bands[limit_figure]
    assert step["projected_s"] == round(projected["step"], 1), (step, projected["step"])  # the band is this figure's
    log = run_log.read_text(encoding="utf-8")
    testing, gen = logged(log, "timing_s/testing"), logged(log, "timing_s/gen")
    save = logged(log, "timing_s/save_checkpoint")
    validation_s, save_s = round(projected["gen"], 1), round(max(save), 1)
    costs, every = (validations, validation_s, saves, save_s), VALIDATION_EVERY
    return {
        "what": "the default run (grpo-gsm8k) on one P40, projected: steps, validations and saves, with the band",
        "command": COMMAND,
        "recipe": str(recipe.resolve().relative_to(REPO)) if recipe.resolve().is_relative_to(REPO) else str(recipe),
        "steps": steps,
        "validations": validations,
        "saves": saves,
        "step_s": {
            "projected": step["projected_s"],
            "low": step["low_s"],
            "high": step["high_s"],
            "errors_pct": step["errors_pct"],
            "source": f"{_named(step_result)} (p40_projection.step); band: {_named(band_file)} ({figure})",
        },
        "step_at_answer_limit_s": {
            "projected": limit["projected_s"],
            "low": limit["low_s"],
            "high": limit["high_s"],
            "source": f"{_named(band_file)} ({limit_figure}): random weights, every answer at the 512-token limit",
        },
        "validation_s": validation_s,
        "validation_basis": {
            "p40_generation_s": projected["gen"],
            "masked_validation_s": [round(t, 2) for t in testing],
            "masked_generation_s_median": round(statistics.median(gen), 2),
            "source": f"{_named(step_result)} (p40_projection.gen); {_named(run_log)} (timing_s/testing, timing_s/gen)",
        },
        "save_s": save_s,
        "save_basis": {"masked_saves_s": [round(t, 2) for t in save], "source": f"{_named(run_log)}"},
        "run_hours": {
            "projected": run_hours(steps, projected["step"], *costs),
            "low": run_hours(steps, step["low_s"], *costs),
            "high": run_hours(steps, step["high_s"], *costs),
        },
        "run_hours_at_answer_limit": {
            "low": run_hours(steps, limit["low_s"], *costs),
            "high": run_hours(steps, limit["high_s"], *costs),
        },
        "hours_at_step": {  # at each validated step: its steps, the validations and saves up to it
            str(n): {
                end: run_hours(n, step[f"{end}_s"], 1 + n // every, validation_s, n // every, save_s)
                for end in ("low", "high")
            }
            for n in range(every, steps + 1, every)
        },
        "worst_step_and_save_s": round(limit["high_s"] + save_s, 1),
    }


def headline(figure: dict) -> str:
    """The run's hours as the READMEs give them: the band to one decimal (1.71-1.90 -> 1.7-1.9)."""
    return f"{figure['run_hours']['low']:.1f}-{figure['run_hours']['high']:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--step-result", type=Path, default=STEP_RESULT)
    parser.add_argument("--band", type=Path, default=BAND)
    parser.add_argument("--figure", default=FIGURE, help="the band file's figure for the default step")
    parser.add_argument("--limit-figure", default=LIMIT_FIGURE, help="its figure with every answer at the limit")
    parser.add_argument("--run-log", type=Path, default=RUN_LOG)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = p40_time(args.recipe, args.step_result, args.band, args.figure, args.limit_figure, args.run_log)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".tmp")
    partial.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    partial.replace(args.out)
    s = out["step_s"]
    print(
        f"~{headline(out)} h: {out['steps']} steps at {s['low']}-{s['high']} s ({s['projected']} s projected), "
        f"{out['validations']} validations at {out['validation_s']} s, {out['saves']} saves at {out['save_s']} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
