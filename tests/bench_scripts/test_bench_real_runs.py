"""The real-weights runs' shared helpers (bench/lib/real_runs.py): following a detached session to its end."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from lib import real_runs  # noqa: E402


def test_wait_copies_the_logs_so_far_but_no_checkpoint(tmp_path, capsys):
    """`wait --copy-to $OUT/partial`: each device call takes the session's logs home, so a machine lost between calls
    (as on 2026-12-01, after step 3) leaves every step logged until then; checkpoints stay behind (gigabytes)."""
    work, target = tmp_path / "work", tmp_path / "out" / "partial"
    (work / "logs" / "gpu").mkdir(parents=True)
    (work / "logs" / "train-1.log").write_text("$ cmd\n(TaskRunner pid=1) step:1 - critic/score/mean:0.5\n")
    (work / "logs" / "gpu" / "gpu.csv").write_text("t,mem\n")
    (work / "ckpt" / "global_step_1").mkdir(parents=True)
    (work / "ckpt" / "global_step_1" / "model.pt").write_text("weights")
    (work / "state.json").write_text("{}")
    (work / "session.log").write_text("console\n")
    real_runs.wait(argparse.Namespace(timeout_s=0, copy_to=str(target)), work)
    copied = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert copied == ["logs/gpu/gpu.csv", "logs/train-1.log", "session.log", "state.json"]
    assert "step 1: training reward 0.500" in capsys.readouterr().out
