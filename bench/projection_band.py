"""The P40 projection with its error bar: every `verl-p40 bench` result given is a calibration (the GPU that ran it,
with the projection's constants measured there); its error against the measured step, and each phase's, say how far
the model was off, and the P40 figures are corrected by each of those errors (verl_p40.perf.projection.error_band).

    R=bench/results; PYTHONPATH=bench python3 bench/projection_band.py --out $R/projection-band-2026-12-05/band.json \
        $R/default-2026-12-04/bench/masked-p40-cap24.json $R/default-2026-12-04/bench/unmasked.json \
        --figure "real-weights stand-in (plan-check-2026-12-03, p40-after)=88.1"

CPU only. The P40 figure of every result given is banded, and each --figure NAME=SECONDS too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verl_p40.perf import projection

RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("gen", "old_log_prob", "ref", "values", "update_actor", "update_critic", "step")


def calibration(path: Path) -> dict:
    """One bench result as a calibration: the GPU, the mask, measured and projected phases, the errors."""
    result = json.loads(path.read_text(encoding="utf-8"))
    measured, here = result["phases_s"], result["projection"]["this_gpu"]
    projected = {k: here[k] for k in PHASES if k in here}
    return {
        "result": _named(path),
        "gpu": result["environment"]["gpus"][0],
        "profile": result["profile"],
        "command": result["command"],
        "measured_s": {k: measured[k] for k in PHASES if k in measured},
        "projected_s": projected,
        "error_pct": projection.phase_errors(measured, projected),
        "p40_step_s": result["projection"]["p40"]["step"],
    }


def _named(path: Path) -> str:
    """The result's path under bench/results (as the READMEs name results), else as given."""
    try:
        return str(path.resolve().relative_to(RESULTS))
    except ValueError:
        return str(path)


def band(calibrations: list[dict], figures: dict[str, float]) -> dict:
    errors = [c["error_pct"]["step"] for c in calibrations]
    named = {f"{c['result']} (P40 projection)": c["p40_step_s"] for c in calibrations} | figures
    return {
        "method": projection.error_band.__doc__.strip(),
        "calibrations": calibrations,
        "bands": {name: {"projected_s": s, **projection.error_band(s, errors)} for name, s in named.items()},
    }


def figure(text: str) -> tuple[str, float]:
    name, _, seconds = text.rpartition("=")
    if not name or not seconds.replace(".", "", 1).isdigit():
        raise argparse.ArgumentTypeError(f"--figure {text!r}: write NAME=SECONDS, e.g. 'p40-after=88.1'")
    return name, float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path, help="`verl-p40 bench` JSON files (the calibrations)")
    parser.add_argument("--figure", type=figure, action="append", default=[], help="NAME=SECONDS: a P40 figure")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out = band([calibration(p) for p in args.results], dict(args.figure))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".tmp")
    partial.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    partial.replace(args.out)
    for c in out["calibrations"]:
        print(f"{c['gpu']} ({c['profile']}): error by phase {c['error_pct']}", file=sys.stderr)
    for name, b in out["bands"].items():
        spread = f"{b['low_s']}-{b['high_s']} s from the calibration errors"
        print(f"{name}: {b['projected_s']} s, {spread}", file=sys.stderr)


if __name__ == "__main__":
    main()
