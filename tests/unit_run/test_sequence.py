"""The one run sequence (run/sequence.py) of `train`, `bench` and `cluster head`, and the machine read once (`Facts`):
the checkpoints folder's lock is taken once on train's path, and each command reads the GPUs through NVML once, for
its plan, its preflight, the cluster's layout and bench's result alike. NVML is tests/nvml/p40's stand-in (one Tesla
P40); the trainer is a stand-in process, or a stand-in function where only the planning and checking are counted."""

from __future__ import annotations

import sys

import pytest

from conftest import run_args
from verl_p40 import cli

# the checks that need a CUDA build of torch, verl's patched copy, or a Ray cluster: not what is counted here
SKIP = "kernels,compute,verl,shm,cluster"


def _reads(pynvml) -> list[int]:
    """Each full read of the GPUs through NVML (every GPU listing starts with nvmlDeviceGetCount)."""
    calls, real = [], pynvml.nvmlDeviceGetCount
    pynvml.nvmlDeviceGetCount = lambda: calls.append(1) or real()
    return calls


def _run_options(tiny_model, prepared, tmp_path) -> list[str]:
    return [*run_args(tiny_model, prepared, tmp_path), "--skip-check", SKIP]


def test_train_takes_the_checkpoints_lock_once(tiny_model, prepared, tmp_path, monkeypatch, p40_host):
    """The lock is taken by the sequence before the run record is written, and handed to the trainer process (here a
    stand-in that prints one step), which keeps it; the trainer does not take it a second time."""
    from verl_p40.plan.planner import RunPlan
    from verl_p40.run import lock

    monkeypatch.setattr(lock, "_held", {})
    taken, real = [], lock.train_lock
    monkeypatch.setattr(lock, "train_lock", lambda folder: taken.append(str(folder)) or real(folder))
    trainer = "import sys; print('step:1 - critic/score/mean:0.5', flush=True)"
    monkeypatch.setattr(RunPlan, "command", lambda self: [sys.executable, "-c", trainer])
    code = cli.main(["train", *_run_options(tiny_model, prepared, tmp_path), "trainer.total_training_steps=1"])
    assert code == 0
    assert len(taken) == 1
    assert list((tmp_path / "ckpt").rglob("verl-p40-run.json")), "train writes its run record"


def test_train_reads_the_gpus_once(tiny_model, prepared, tmp_path, monkeypatch, p40_host, capsys):
    """The plan and the preflight's gpu check see the same Facts: NVML's GPU list is read once."""
    from verl_p40.run import trainer

    reads = _reads(p40_host)
    monkeypatch.setattr(trainer, "run_trainer", lambda run, logs, locks=(): 0)
    code = cli.main(["train", *_run_options(tiny_model, prepared, tmp_path)])
    report = capsys.readouterr().err
    assert code == 0, report
    assert "PASS  gpu         driver 535.183.01 (CUDA 12.2), GPU 0: Tesla P40" in report
    assert len(reads) == 1


def test_doctor_reads_the_gpus_once(tiny_model, prepared, tmp_path, p40_host, capsys):
    """`verl-p40 doctor`: the gpu check, the kernels check and the plan the ram check needs read one Facts."""
    reads = _reads(p40_host)
    options = run_args(tiny_model, prepared, tmp_path)
    cli.main(["doctor", *options, "--only", "gpu,kernels,ram"])
    out = capsys.readouterr().out
    assert "PASS  gpu" in out and "GPU 0: Tesla P40" in out and "ram" in out
    assert len(reads) == 1


def test_bench_reads_the_gpus_once_and_keeps_no_run_record(tiny_model, prepared, tmp_path, monkeypatch, p40_host):
    """bench's plan, preflight and its result's environment are of one Facts; its run goes through the same
    sequence as train's (one lock), without a run record: it keeps no checkpoint."""
    import json

    from bench_standins import stand_in

    from verl_p40.run import lock, sequence

    reads = _reads(p40_host)
    records, taken = [], []
    # patched where the sequence calls it: patching verl_p40.models.checkpoints' copy missed the sequence when it was
    # imported before, and when this test imported it first, the stand-in stayed there for the tests after it
    monkeypatch.setattr(sequence, "write_run_record", lambda record: records.append(record))
    monkeypatch.setattr(lock, "train_lock", lambda folder: taken.append(folder) or 99)
    handed = stand_in(monkeypatch, tiny_model)
    out = tmp_path / "bench.json"
    options = [*run_args(tiny_model, prepared, tmp_path, checkpoints=False, logs=False), "--skip-check", SKIP + ",ram"]
    assert cli.main(["bench", *options, "--out", str(out), "--steps", "2"]) == 0
    environment = json.loads(out.read_text())["environment"]
    assert environment["gpus"] == ["GPU 0: Tesla P40, sm_61, 24.0 GiB"] and environment["driver"] == "535.183.01"
    assert len(reads) == 1 and len(taken) == 1 and handed == [(99,)] and records == []


def test_cluster_head_reads_the_gpus_once_and_trains_through_the_sequence(
    tiny_model, prepared, tmp_path, monkeypatch, p40_host
):
    """`cluster head`: the layout its Ray head starts with and the run's plan and preflight are of one Facts; the
    run goes through train's sequence (its run record written, its lock taken once). Ray is a stand-in."""
    from verl_p40.run import cluster, lock, trainer

    reads = _reads(p40_host)
    started, taken = [], []
    monkeypatch.setattr(cluster, "_run", lambda command, env: started.append((command, env)))
    monkeypatch.setattr(cluster, "wait_for", lambda *args: None)
    monkeypatch.setattr(cluster.subprocess, "run", lambda *args, **kw: None)  # ray stop
    monkeypatch.setenv("RAY_ADDRESS", "unset")
    monkeypatch.setattr(lock, "train_lock", lambda folder: taken.append(folder) or 99)
    monkeypatch.setattr(trainer, "run_trainer", lambda run, logs, locks=(): 0)
    assert cli.main(["cluster", "head", "--nodes", "1", *_run_options(tiny_model, prepared, tmp_path)]) == 0
    ((command, _),) = started  # the head's Ray, with the one P40 NVML reports
    assert command[command.index("--num-gpus") + 1] == "1"
    assert len(reads) == 1 and len(taken) == 1
    assert list((tmp_path / "ckpt").rglob("verl-p40-run.json"))


@pytest.fixture(autouse=True)
def _no_status_service(monkeypatch):
    monkeypatch.delenv("VERL_P40_SERVICE", raising=False)
