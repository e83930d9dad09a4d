"""CPU check (issue 66): each parquet read that moved from pandas to pyarrow, run in a fresh child process N times,
before (the pandas read as the code had it) and after (the pyarrow read as it has it now), counting the runs that did
not exit 0 (an abort at exit is exit 134, "terminate called without an active exception").

    python bench/experiments/parquet_reads.py --data DIR [--runs 30] [--out bench/results/parquet-reads-DATE]

DIR is a prepared GSM8K folder (`verl-p40 prep --out DIR`: test.parquet, train.parquet). Writes result.json: the
interpreter, pandas, pyarrow and numpy versions, the CPU's model and flags, and for each read its code and the exit
codes of its runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

# the reads, as the code had them (pandas) and has them now (pyarrow); F is the file, N the rows the code keeps
READS = {
    "bench/lib/rollout_actor.py prompts": {
        "file": "test.parquet",
        "before": "import pandas as pd; rows = pd.read_parquet(F).head(64); list(rows.prompt)",
        "after": "import pyarrow.parquet as pq; "
        "pq.read_table(F, columns=['prompt']).slice(0, 64).column('prompt').to_pylist()",
    },
    "bench/experiments/greedy_agreement.py stage_data (test)": {
        "file": "test.parquet",
        "before": "import pandas as pd; pd.read_parquet(F)",
        "after": "import pyarrow.parquet as pq; pq.read_table(F)",
    },
    "bench/experiments/greedy_agreement.py stage_data (train)": {
        "file": "train.parquet",
        "before": "import pandas as pd; pd.read_parquet(F)",
        "after": "import pyarrow.parquet as pq; pq.read_table(F)",
    },
}


def runs(code: str, path: Path, count: int) -> list[int]:
    """The exit codes of `count` fresh interpreters running `code` with F set to `path`."""
    return [
        subprocess.run([sys.executable, "-c", f"F = {str(path)!r}; {code}"], capture_output=True).returncode
        for _ in range(count)
    ]


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines()[:30])}
    return {"model": field.get("model name"), "flags": field.get("flags")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared GSM8K folder (test.parquet, train.parquet)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default=f"bench/results/parquet-reads-{time.strftime('%Y-%m-%d')}")
    args = parser.parse_args()
    import numpy
    import pandas
    import pyarrow

    result = {
        "command": " ".join(["python", *sys.argv]),
        "python": platform.python_version(),
        "versions": {"pandas": pandas.__version__, "pyarrow": pyarrow.__version__, "numpy": numpy.__version__},
        "cpu": cpu(),
        "runs": args.runs,
        "reads": {},
    }
    for name, read in READS.items():
        path = Path(args.data) / read["file"]
        entry = {"file": read["file"]}
        for when in ("before", "after"):
            codes = runs(read[when], path, args.runs)
            failed = sum(code != 0 for code in codes)
            entry[when] = {"code": read[when], "failed": failed, "exit_codes": dict(collections.Counter(codes))}
            print(f"{name}, {when}: {failed} of {args.runs} runs did not exit 0 {dict(collections.Counter(codes))}")
        result["reads"][name] = entry
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'result.json'}")


if __name__ == "__main__":
    main()
