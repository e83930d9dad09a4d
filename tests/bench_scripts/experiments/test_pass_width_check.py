"""The GPU check of whether a pass's time follows the tokens it runs on (bench/experiments/pass_width_check.py), run
here on a CPU (--cpu: two layers, a small vocabulary): every row count is timed at every width, and the report sets
each width's time against the widest beside the projection's FLOPs for it."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_check_times_every_width_against_the_widest(tokenizer_dir, tmp_path):
    command = [sys.executable, str(REPO / "bench" / "experiments" / "pass_width_check.py"), "--cpu"]
    command += ["--config", str(tokenizer_dir), "--rows", "2,4", "--widths", "128,256", "--reps", "1"]
    command += ["--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "pass-width.json").read_text())
    assert [(r["rows"], r["width"]) for r in report["results"]] == [(2, 16), (2, 32), (4, 16), (4, 32)]
    assert all(r["forward_ms"] > 0 and r["update_ms"] > 0 for r in report["results"])
    for rows in ("2", "4"):
        narrow, widest = report["time_against_widest"][rows]
        assert widest == {"width": 32, "flops_ratio": 1.0, "forward_time_ratio": 1.0, "update_time_ratio": 1.0}
        assert 0.4 < narrow["flops_ratio"] < 0.6  # half the tokens, and attention a little less than half
    assert report["kernels"] == "cpu (the script's own check)"
