"""Smoke test of the real trainer: `verl-p40 train` runs verl 0.5.0's own PPO loop (`verl.trainer.main_ppo`,
patched by the CLI) for 2 steps on a tiny Qwen2 with the p40 profile, saves a checkpoint, resumes from it, and
`verl-p40 eval --compare latest` merges that checkpoint with verl's merger. CPU only: FSDP2 (FSDP1 refuses the
CPU), a Ray cluster started here with a stand-in GPU resource, and the CPU stand-ins in tests/cpu_shims/
(never part of the shipped code)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, make_tiny_qwen

from verl_p40.metrics import read_steps

BIN = Path(sys.executable).parent
CPU_OVERRIDES = [  # what a CPU needs on top of the p40 profile, plus a tiny batch
    "trainer.device=cpu", "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
    "critic.strategy=fsdp2", "data.dataloader_num_workers=0", "trainer.logger=[console]",
    "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "critic.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", "data.max_response_length=16",
    "trainer.save_freq=2", "trainer.ray_wait_register_center_timeout=180",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false", "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    "critic.model.fsdp_config.param_offload=false", "critic.model.fsdp_config.optimizer_offload=false",
]


@pytest.fixture(scope="module")
def cluster(patched_verl, tmp_path_factory):
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests' / 'cpu_shims'}{os.pathsep}{patched_verl}",
           "VERL_P40_CPU_SHIMS": "1", "RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "TOKENIZERS_PARALLELISM": "false",
           # no GPU here: the preflight's GPU checks are skipped by name (they say so in the log)
           "VERL_P40_DOCTOR_SKIP": "gpu,kernels,compute"}
    temp = tmp_path_factory.mktemp("ray")
    started = subprocess.run([str(BIN / "ray"), "start", "--head", "--num-cpus", "4", "--num-gpus", "1",
                              "--resources", '{"cpu": 4}', "--include-dashboard=false", "--disable-usage-stats",
                              f"--temp-dir={temp}"], env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    env["RAY_ADDRESS"] = "auto"
    yield env
    subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def run_dirs(tokenizer_dir, gsm8k_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("cpu-train")
    model = make_tiny_qwen(tokenizer_dir, root / "model")
    prep = subprocess.run([sys.executable, "-m", "verl_p40.cli", "prep", "--source", str(gsm8k_dir), "--out",
                           str(root / "data"), "--limit", "16"], capture_output=True, text=True, cwd=REPO)
    assert prep.returncode == 0, prep.stderr
    return {"model": model, "data": root / "data", "checkpoints": root / "ckpt", "root": root}


def _train(cluster, dirs, logs, steps):
    return subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "train", "--profile", "p40", "--model", str(dirs["model"]),
         "--data", str(dirs["data"]), "--checkpoints", str(dirs["checkpoints"]), "--logs", str(logs),
         *CPU_OVERRIDES, f"trainer.total_training_steps={steps}"],
        env=cluster, capture_output=True, text=True, cwd=REPO, timeout=900)


def test_two_ppo_steps_then_resume_then_eval_the_checkpoint(cluster, run_dirs):
    first = _train(cluster, run_dirs, run_dirs["root"] / "logs1", steps=2)
    log1 = next((run_dirs["root"] / "logs1").glob("train-*.log"))
    assert first.returncode == 0, log1.read_text()[-4000:]
    steps = read_steps(log1)
    assert [int(s["step"]) for s in steps] == [1, 2]
    for key in ("timing_s/gen", "timing_s/ref", "timing_s/values", "timing_s/update_critic", "timing_s/update_actor",
                "critic/score/mean", "actor/reward_kl_penalty"):
        assert key in steps[-1], key
    experiment = run_dirs["checkpoints"] / "qwen2.5-0.5b-gsm8k-ppo"
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (experiment / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    assert (experiment / "global_step_2" / "critic").is_dir()

    # The same command with a longer run continues from global_step_2 instead of starting over.
    second = _train(cluster, run_dirs, run_dirs["root"] / "logs2", steps=3)
    log2 = next((run_dirs["root"] / "logs2").glob("train-*.log"))
    assert second.returncode == 0, log2.read_text()[-4000:]
    assert [int(s["step"]) for s in read_steps(log2)] == [3]
    assert "global_step_2" in log2.read_text()

    # eval merges the newest checkpoint with verl's own merger, in fp32, and compares it with the base model.
    out = run_dirs["root"] / "eval"
    evaluation = subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "eval", "--model", str(run_dirs["model"]), "--compare", "latest",
         "--checkpoints", str(run_dirs["checkpoints"]), "--data", str(run_dirs["data"] / "test.parquet"),
         "--out", str(out), "--device", "cpu", "--max-new-tokens", "8", "--limit", "3",
         "--logs", str(run_dirs["root"] / "logs1")],
        env=cluster, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert evaluation.returncode == 0, evaluation.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    merged = Path(report["models"]["trained"]["path"])
    assert merged.parent.name == "actor" and merged.parent.parent.name == "global_step_3"
    assert json.loads((merged / "config.json").read_text())["torch_dtype"] == "float32"
    assert report["questions"] == 3 and report["curves"] == "curves.png"


def test_a_zero_byte_parquet_ends_with_the_trainers_one_line(cluster, run_dirs, tmp_path):
    """The preflight would stop this; skipped by name, verl's real loop meets it and the trainer says what to do."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")
    (data / "test.parquet").write_bytes((run_dirs["data"] / "test.parquet").read_bytes())
    result = subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "train", "--profile", "p40", "--model", str(run_dirs["model"]),
         "--data", str(data), "--checkpoints", str(tmp_path / "ckpt"), "--logs", str(tmp_path / "logs"),
         "--skip-check", "data", *CPU_OVERRIDES, "trainer.total_training_steps=1"],
        env=cluster, capture_output=True, text=True, cwd=REPO, timeout=900)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stdout[-3000:]
    assert last.startswith(f"verl-p40 train: error: {data / 'train.parquet'}: not a readable parquet file"), last
    assert "verl-p40 prep" in last


def test_checkpoints_on_a_full_disk_end_with_the_trainers_one_line(cluster, run_dirs, tmp_path):
    """Checkpoints written to a 2 MB tmpfs (the preflight's disk check skipped by name)."""
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(full)], capture_output=True, text=True)
    assert mounted.returncode == 0, f"this test needs root to mount a small tmpfs: {mounted.stderr}"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "verl_p40.cli", "train", "--profile", "p40", "--model", str(run_dirs["model"]),
             "--data", str(run_dirs["data"]), "--checkpoints", str(full), "--logs", str(tmp_path / "logs"),
             "--skip-check", "disk", *CPU_OVERRIDES, "trainer.total_training_steps=1", "trainer.save_freq=1"],
            env=cluster, capture_output=True, text=True, cwd=REPO, timeout=900)
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stdout[-3000:]
    assert last.startswith("verl-p40 train: error: disk full"), last
    assert "trainer.max_actor_ckpt_to_keep=1" in last
