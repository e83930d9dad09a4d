"""The scaling bench (bench/scale_run.py): its layouts for 1, 2 and 4 GPUs, and its report read from committed
results: the measured speed-up against its target, which states the layout kept on the GPU, and the P40 projection
of each layout by bench/project.py."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import scale_run  # noqa: E402


def test_layouts_name_every_gpu_count_the_issue_asks_for():
    assert scale_run.layouts("1,2,4") == [(1, "one-gpu", "0"), (2, "two-gpus", "0,1"), (4, "four-gpus", "0,1,2,3")]
    with pytest.raises(SystemExit, match="3 GPUs is not one of"):
        scale_run.layouts("1,3")


def test_the_report_of_the_two_gpu_run(tmp_path):
    table = scale_run.report(REPO / "bench" / "results" / "scale-2026-11-30")
    assert "| 2 GPUs | 128 | 22.501 | 5.689 | 2.03x |" in table
    assert "critic Adam states, actor Adam states" in table and "none (the profile's offloading)" in table
    assert "1.60x" in table  # two P40s over PCIe, as docs/multi-gpu.md says (1.6x)
    assert "2 GPUs: 2.03x the prompts/s of 1 (target 1.8x: reached)." in table


def test_four_gpus_below_the_target_say_so(tmp_path):
    """A 4-GPU result at 3.0x of one GPU is reported as below issue 34's 3.6x."""
    source = REPO / "bench" / "results" / "scale-2026-11-30"
    one = json.loads((source / "scale-one-gpu.json").read_text())
    (tmp_path / "scale-one-gpu.json").write_text(json.dumps(one))
    four = json.loads((source / "scale-two-gpus.json").read_text())
    four["prompts_per_s"] = round(3.0 * one["prompts_per_s"], 3)
    four["command"] = four["command"].replace("--gpus 0,1", "--gpus 0,1,2,3")
    (tmp_path / "scale-four-gpus.json").write_text(json.dumps(four))
    table = scale_run.report(tmp_path)
    assert "4 GPUs: 3.00x the prompts/s of 1 (target 3.6x: NOT reached)." in table
