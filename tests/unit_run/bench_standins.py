"""Stand-ins for bench's GPU parts (the random-weight model, the calibration, the trainer, the GPU sampler), for the
tests that count what `verl-p40 bench` plans, checks and reads on a machine without a GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

STEP = "step:{} - timing_s/step:2.0 - timing_s/gen:1.0 - response_length/max:16.0 - response_length/mean:8.0"
CARD = {"name": "stand-in", "gemm_tflops": 10.0, "memory_gbs": 300.0, "pcie_gbs": 10.0, "source": "test"}


class NoSampler:
    """The GPU monitor's sampler (it needs NVML in a thread), measuring nothing."""

    def __init__(self, folder):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def peaks(self):
        return {"nvml_peak_process_gb": 0.0}


def stand_in(monkeypatch, tiny_model: Path) -> list[tuple[int, ...]]:
    """bench's GPU parts replaced; the locks each trainer run was handed, in order."""
    from verl_p40.perf import bench
    from verl_p40.run import trainer

    handed: list[tuple[int, ...]] = []

    def fake_trainer(run, logs, locks=()):
        handed.append(locks)
        Path(logs).mkdir(parents=True, exist_ok=True)
        (Path(logs) / "train-1.log").write_text("\n".join(STEP.format(i) for i in (1, 2)) + "\n")
        return 0

    monkeypatch.setattr(bench, "make_random_model", lambda source, out: shutil.copytree(tiny_model, out))
    monkeypatch.setattr(bench, "_calibration", lambda model: CARD)
    monkeypatch.setattr(trainer, "run_trainer", fake_trainer)
    monkeypatch.setattr(bench, "Sampler", NoSampler)
    return handed
