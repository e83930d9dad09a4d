"""CPU bench: `verl-p40 prep` on the full GSM8K (8,792 rows), pinned to one core, repeated.

    taskset -c 0 python bench/experiments/prep_speed.py --source ../shared/data/gsm8k --out bench/results

Writes prep-speed-<date>.json: wall time of each run of the real CLI (a fresh process each time, so Python and
pyarrow start-up are included), and the in-process conversion time `prep` reports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            # no validation slice: the committed timings converted the splits as they are (prep's default now also
            # holds 256 train rows out)
            cmd = [
                sys.executable,
                "-m",
                "verl_p40.cli",
                "prep",
                "--source",
                args.source,
                "--out",
                tmp,
                "--val-size",
                "0",
            ]
            started = time.perf_counter()
            result = subprocess.run(cmd, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - started
            inner = float(re.search(r"done in ([0-9.]+) s", result.stdout).group(1))
            rows = sum(int(n) for n in re.findall(r"(\d+) rows", result.stdout))
            runs.append({"wall_s": round(wall, 3), "prep_reported_s": inner, "rows": rows})
    result = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d"),
        "runs": runs,
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "median_prep_reported_s": statistics.median(r["prep_reported_s"] for r in runs),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"prep-speed-{time.strftime('%Y-%m-%d')}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
