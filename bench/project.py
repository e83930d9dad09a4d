"""The P40 projection beside every committed timing result: each run's recorded trainer command gives its verl config,
its logged steps give the token counts and the measured phases, and `verl_p40.perf.projection` turns them into
seconds on a Tesla P40 (and, as a check, on the H200 that ran it, whose constants `verl-p40 bench` measured on
2026-11-30).

    python3 bench/project.py --out bench/results/projections.json   (CPU only; reads bench/results/*)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

from lib.run_projection import H200, SHARED, project_run
from verl_p40.perf import projection
from verl_p40.run.trainer_log import read_steps

RESULTS = Path(__file__).parent / "results"


def collect() -> list[tuple[str, str, list[dict], bool]]:
    runs = []
    for r in json.loads((RESULTS / "p40-profile-2026-11-29.json").read_text())["runs"]:
        runs.append((f"p40-profile-2026-11-29/{r['name']}", r["command"], r["steps"], False))
    for lr in ("lr3e-5", "lr1e-4"):
        r = json.loads((RESULTS / f"learning-check-2026-11-29-{lr}.json").read_text())["run"]
        runs.append((f"learning-check-2026-11-29-{lr}", r["command"], r["steps"], False))
    folder = "real-weights-ppo-warmup-2026-11-29"  # real weights: responses of real lengths
    command = json.loads((RESULTS / folder / "real-weights-state.json").read_text())["train_command"]
    with tarfile.open(RESULTS / folder / "real-weights-work.tgz") as tar:
        for member in sorted(tar.getnames()):
            if re.fullmatch(r"logs/train-[0-9-]+\.log", member):
                with tempfile.NamedTemporaryFile("wb", suffix=".log") as plain:
                    plain.write(tar.extractfile(member).read())
                    plain.flush()
                    steps = [s for s in read_steps(plain.name) if "timing_s/update_actor" in s]  # after warm-up
                if steps:
                    runs.append((f"{folder}/{member}", command, steps, False))
    for path in sorted([*RESULTS.glob("trim-2026-11-30/trim-*.json"), *RESULTS.glob("scale-2026-11-30/scale-*.json")]):
        r = json.loads(path.read_text())  # `verl-p40 bench` results of the product's own settings
        runs.append((f"{path.parent.name}/{path.stem}", r["command"], r["steps"][1:], True))  # step 1: warm-up
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=SHARED, help="the model's config.json folder [%(default)s]")
    parser.add_argument("--log", type=Path, help="project only this trainer log (a learning run's), as --command runs")
    parser.add_argument(
        "--command",
        help="with --log: the `verl-p40 train ...` command whose config is projected "
        "(e.g. the p40-profile command of a recipe a fast run measured)",
    )
    args = parser.parse_args()
    shape = projection.Shape.from_config(json.loads((args.config / "config.json").read_text()))
    if args.log:  # one run: the command's config on a P40, with the logged run's answer lengths
        steps = [s for s in read_steps(args.log) if "timing_s/step" in s]
        row = project_run(str(args.log), args.command, steps, shape, recent=True)
        args.out.write_text(json.dumps(row, indent=2) + "\n")
        print(
            f"P40: {row['p40_projection']['step']} s/step, {row['p40_hours_per_gsm8k_epoch']} h/epoch", file=sys.stderr
        )
        return
    # the committed runs were made before issue 67's speed-ups were the plan's defaults: projected as they ran
    rows = [project_run(name, cmd, steps, shape, recent, recorded=True) for name, cmd, steps, recent in collect()]
    args.out.write_text(
        json.dumps(
            {
                "model": projection.__doc__.split("\n\n")[1],
                "h200": projection.card_dict(H200),
                "p40": projection.card_dict(projection.P40),
                "runs": rows,
            },
            indent=2,
        )
        + "\n"
    )
    for r in rows:
        t = r["with_trim_padding"]
        print(
            f"{r['run']}: measured {r['measured_s_per_step']} s/step, H200 model {r['h200_projection']['step']}, "
            f"P40 {r['p40_projection']['step']} s/step ({r['p40_hours_per_gsm8k_epoch']} h/epoch); with trim_padding "
            f"at width {t['pass_width']}: {t['p40_projection']['step']} s/step "
            f"({t['p40_hours_per_gsm8k_epoch']} h/epoch)",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
