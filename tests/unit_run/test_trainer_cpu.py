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

from conftest import ONE_RAY, REPO, make_tiny_qwen
from verl_p40.run.trainer_log import read_steps

pytestmark = ONE_RAY  # a Ray cluster of its own, stopped with `ray stop --force` (conftest.ONE_RAY)
BIN = Path(sys.executable).parent
# `verl-p40 train` of the seed's PPO (a critic too) with the p40 profile; a test naming another --algorithm wins
TRAIN = [sys.executable, "-m", "verl_p40.cli", "train", "--algorithm", "ppo", "--profile", "p40"]
CPU_OVERRIDES = [  # what a CPU needs on top of the p40 profile, plus a tiny batch
    "trainer.device=cpu",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "critic.strategy=fsdp2",
    "data.dataloader_num_workers=0",
    "trainer.logger=[console]",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "data.max_response_length=16",
    "trainer.save_freq=2",
    "trainer.ray_wait_register_center_timeout=180",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
    "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    "critic.model.fsdp_config.param_offload=false",
    "critic.model.fsdp_config.optimizer_offload=false",
]


@pytest.fixture(scope="module")
def cluster(patched_verl, tmp_path_factory):
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO / 'tests' / 'cpu_shims'}{os.pathsep}{patched_verl}",
        "VERL_P40_CPU_SHIMS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "TOKENIZERS_PARALLELISM": "false",
        # no GPU here: the preflight's GPU checks are skipped by name (they say so in the log)
        "VERL_P40_DOCTOR_SKIP": "gpu,kernels,compute",
        # Ray starts its workers at nice 15: beside the rest of the suite (the other pytest-xdist worker, nice 0) the
        # trainer's processes got a fraction of a core and these tests, the suite's longest chain, took twice as long
        "RAY_worker_niceness": "0",
    }
    temp = tmp_path_factory.mktemp("ray")
    started = subprocess.run(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--num-cpus",
            "4",
            "--num-gpus",
            "1",
            "--resources",
            '{"cpu": 4}',
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stderr
    env["RAY_ADDRESS"] = "auto"
    yield env
    subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def run_dirs(tokenizer_dir, gsm8k_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("cpu-train")
    model = make_tiny_qwen(tokenizer_dir, root / "model")
    prep = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_p40.cli",
            "prep",
            "--source",
            str(gsm8k_dir),
            "--out",
            str(root / "data"),
            "--limit",
            "16",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert prep.returncode == 0, prep.stderr
    return {"model": model, "data": root / "data", "checkpoints": root / "ckpt", "root": root}


def _train(cluster, dirs, logs, steps, *options):
    return subprocess.run(
        [
            *TRAIN,
            "--model",
            str(dirs["model"]),
            "--data",
            str(dirs["data"]),
            "--checkpoints",
            str(dirs["checkpoints"]),
            "--logs",
            str(logs),
            *options,
            *CPU_OVERRIDES,
            f"trainer.total_training_steps={steps}",
        ],
        env=cluster,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )


def _trainer_log(result, logs: Path) -> Path:
    """The run's log, after asserting it succeeded (with the log's tail, or the CLI's own error, as the message)."""
    found = sorted(logs.glob("train-*.log"))
    assert result.returncode == 0, (found[0].read_text() if found else result.stdout + result.stderr)[-4000:]
    return found[0]


def _eval_latest(cluster, dirs, out, checkpoints, logs):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_p40.cli",
            "eval",
            "--model",
            str(dirs["model"]),
            "--compare",
            "latest",
            "--checkpoints",
            str(checkpoints),
            "--data",
            str(dirs["data"] / "test.parquet"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--max-new-tokens",
            "8",
            "--limit",
            "3",
            "--logs",
            str(logs),
        ],
        env=cluster,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )


def test_two_ppo_steps_then_resume_then_eval_the_checkpoint(cluster, run_dirs):
    first = _train(cluster, run_dirs, run_dirs["root"] / "logs1", steps=2)
    log1 = _trainer_log(first, run_dirs["root"] / "logs1")
    steps = read_steps(log1)
    assert [int(s["step"]) for s in steps] == [1, 2]
    for key in (
        "timing_s/gen",
        "timing_s/ref",
        "timing_s/values",
        "timing_s/update_critic",
        "timing_s/update_actor",
        "critic/score/mean",
        "actor/reward_kl_penalty",
        # the reward's parts, every training step (patch reward-parts-in-training-metrics)
        "reward/acc/mean",
        "reward/strict/mean",
        "reward/flexible/mean",
        "reward/format/mean",
    ):
        assert key in steps[-1], key
    assert steps[-1]["reward/acc/mean"] == steps[-1]["reward/strict/mean"]  # the default reward is strict
    # the progress line a step, read from verl's own output, and the status file after the run (issue 58)
    assert "[verl-p40] step 1 of 2, " in first.stderr and "[verl-p40] step 2 of 2, " in first.stderr
    assert "Model config after override" not in first.stdout and "Model config after override" in log1.read_text()
    run = json.loads((run_dirs["root"] / "logs1" / "status.json").read_text())["run"]
    assert run["state"] == "ended" and run["step"] == 2 and run["total_steps"] == 2 and run["step_s"] > 0
    experiment = run_dirs["checkpoints"] / "model-gsm8k-ppo"  # <model folder>-gsm8k-<algorithm>
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
    evaluation = _eval_latest(cluster, run_dirs, out, run_dirs["checkpoints"], run_dirs["root"] / "logs1")
    assert evaluation.returncode == 0, evaluation.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    merged = Path(report["models"]["trained"]["path"])
    assert merged.parent.name == "actor" and merged.parent.parent.name == "global_step_3"
    assert json.loads((merged / "config.json").read_text())["torch_dtype"] == "float32"
    assert report["questions"] == 3 and report["curves"] == "curves.png"

    # export takes the same checkpoint home: its fp32 Hugging Face folder gives the checkpoint's logits
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_p40.cli",
            "export",
            "--checkpoints",
            str(run_dirs["checkpoints"]),
            "--out",
            str(run_dirs["root"] / "exports"),
            "--dtype",
            "fp32",
        ],
        env=cluster,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    import torch
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[151644, 872, 198, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]])
    logits = [
        AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()(ids).logits.detach()
        for path in (merged, run_dirs["root"] / "exports" / "global_step_3-hf-fp32")
    ]
    assert (logits[0] - logits[1]).abs().max() <= 1e-5


def test_two_grpo_steps_with_two_samples_per_prompt(cluster, run_dirs, tmp_path):
    """GRPO through verl's real loop and the HF rollout with n = 2: no critic, KL as a loss, and every prompt
    answered twice (2 x 4 prompts = 8 responses a step; without the rollout patch verl asks for 2 x 2 each and stops
    on 'Two tensor dict must have identical batch size')."""
    dirs = {**run_dirs, "checkpoints": tmp_path / "ckpt"}
    validated = ["trainer.test_freq=2"]
    # the two opt-ins of issue 60, through verl's real loop: the rollout's old log-probs, the length-grouped update
    opt_in = ["actor_rollout_ref.rollout.p40_log_probs=auto", "actor_rollout_ref.actor.p40_update_tokens=672"]
    result = _train(
        cluster, dirs, tmp_path / "logs", 2, "--algorithm", "grpo", "--samples-per-prompt", "2", *validated, *opt_in
    )
    log = _trainer_log(result, tmp_path / "logs")
    assert "algorithm: grpo (grpo), 2 samples per prompt" in result.stderr
    steps = read_steps(log)
    assert [int(s["step"]) for s in steps] == [1, 2]
    last = steps[-1]
    assert "actor/kl_loss" in last and "timing_s/update_critic" not in last and "timing_s/values" not in last
    # the old log-probs and actor/entropy are the rollout's own (plan/log_probs.py): verl's pass did not run
    assert "verl's old_log_prob pass skipped" in result.stderr
    assert "old log-probs: the rollout's own (fp32, the actor's weights): verl's old_log_prob pass skipped" in (
        log.read_text()
    )
    assert all(s["actor/entropy"] > 0 and "training/rollout_probs_diff_max" not in s for s in steps)
    assert all(s["perf/p40_old_log_prob_pass"] == 0.0 for s in steps)
    from verl_p40.run.trainer_log import VALIDATION_KEY

    assert VALIDATION_KEY in last  # and the run's validation is produced
    # verl's balance step logs the tokens of each sequence: 8 sequences of prompt + response a step
    assert last["global_seqlen/mean"] > 0
    experiment = dirs["checkpoints"] / "model-gsm8k-grpo"
    assert (experiment / "global_step_2" / "actor").is_dir() and not (experiment / "global_step_2" / "critic").exists()
    record = json.loads((experiment / "verl-p40-run.json").read_text())
    assert record["algorithm"] == "grpo" and record["samples_per_prompt"] == 2 and record["lora"] is None


def test_a_run_longer_than_its_data_ends_at_its_step_saved_and_validated_and_a_resume_trains_nothing(
    cluster, run_dirs, tmp_path
):
    """16 train rows, 4 prompts a step: verl's loader (drop_last) has 4 batches a pass, and 6 steps asked. The plan
    gives verl the 2 passes they need (the profile's trainer.total_epochs=1 ended the run at step 4, unsaved and
    unvalidated as the last); step 6 is validated and saved though no multiple of save_freq or test_freq. The same
    command again says the run is finished and trains nothing (verl would load step 6 and train step 7)."""
    dirs = {**run_dirs, "checkpoints": tmp_path / "ckpt"}
    length = ["trainer.save_freq=4", "trainer.test_freq=4", "trainer.val_before_train=false"]
    result = _train(cluster, dirs, tmp_path / "logs", 6, *length)
    log = _trainer_log(result, tmp_path / "logs")
    steps = read_steps(log)
    assert [int(s["step"]) for s in steps] == [1, 2, 3, 4, 5, 6]
    assert "6 steps of 4 prompts = 1.50 epochs of 16 rows" in result.stderr, result.stderr[-3000:]
    from verl_p40.run.trainer_log import VALIDATION_KEY

    assert VALIDATION_KEY in steps[-1]  # the last step validated
    experiment = dirs["checkpoints"] / "model-gsm8k-ppo"
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == "6"
    assert (experiment / "global_step_6" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    record = json.loads((experiment / "verl-p40-run.json").read_text())
    assert (record["prompts_per_step"], record["steps"], record["passes"], record["rows"]) == (4, 6, 2, 16)
    assert record["epochs"] == 1.5

    again = _train(cluster, dirs, tmp_path / "logs2", 6, *length)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "finished, its newest checkpoint is step 6 of 6; nothing to train" in again.stderr
    assert not list((tmp_path / "logs2").glob("train-*.log"))  # no trainer started
    assert sorted(p.name for p in experiment.glob("global_step_*")) == ["global_step_4", "global_step_6"]


@pytest.mark.parametrize("trim", ["true", "false"])
def test_bf16_mixed_precision_keeps_every_gradient_finite(cluster, run_dirs, tmp_path, trim):
    """Issue 33's first suspect list, on the path a CPU can run: bf16 mixed precision (params fp32, compute bf16,
    reduce fp32, as the ampere profile had it) through verl's PPO loop with the whole patch set (its autocast-dtype
    edits, SDPA, the value head) gives finite actor and critic gradient norms in every step, with padding trimming on
    (every profile since 2026-12-01) and off (the full width, as the 2026-11-30 H200 run that gave NaN had it: fully
    masked padding rows reach SDPA and the value head). The H200's NaN (FSDP1, CUDA SDPA kernels in bf16) is therefore
    not in these edits' CPU behaviour."""
    import math

    mixed = [
        f"+{key}.fsdp_config.mixed_precision.param_dtype=bf16"
        for key in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")
    ]
    width = [f"actor_rollout_ref.model.trim_padding={trim}", f"critic.model.trim_padding={trim}"]
    dirs = {**run_dirs, "checkpoints": tmp_path / "ckpt"}
    result = _train(cluster, dirs, tmp_path / "logs", 2, *mixed, *width, "actor_rollout_ref.rollout.dtype=bfloat16")
    log = _trainer_log(result, tmp_path / "logs")
    assert "'param_dtype': 'bf16'" in log.read_text()  # verl got bf16, not the profile's fp32
    assert f"'trim_padding': {trim.title()}" in log.read_text()  # the width asked for reached verl's config
    steps = read_steps(log)
    assert [int(s["step"]) for s in steps] == [1, 2]
    for step in steps:
        for key in ("actor/grad_norm", "critic/grad_norm"):
            assert key in step and math.isfinite(step[key]), (key, step.get(key))


def test_lora_grpo_checkpoint_is_merged_and_scored(cluster, run_dirs, tmp_path):
    """--lora-rank: verl trains a peft adapter (reference = adapter off); eval merges the checkpoint with the
    run's alpha and scores it beside the base model."""
    dirs = {**run_dirs, "checkpoints": tmp_path / "ckpt"}
    result = _train(
        cluster,
        dirs,
        tmp_path / "logs",
        2,
        "--algorithm",
        "grpo",
        "--samples-per-prompt",
        "2",
        "--lora-rank",
        "4",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        # every reward is 0 for a random tiny model: the entropy bonus is what moves the adapter
        "actor_rollout_ref.actor.entropy_coeff=0.01",
    )
    log = _trainer_log(result, tmp_path / "logs")
    assert "Applying LoRA to actor module" in log.read_text()
    experiment = dirs["checkpoints"] / "model-gsm8k-grpo-lora4"
    assert json.loads((experiment / "verl-p40-run.json").read_text())["lora"] == {
        "rank": 4,
        "alpha": 8,
        "target_modules": "all-linear",
    }
    out = tmp_path / "eval"
    evaluation = _eval_latest(cluster, dirs, out, dirs["checkpoints"], tmp_path / "logs")
    assert evaluation.returncode == 0, evaluation.stderr[-4000:]
    assert "LoRA adapter (rank 4, alpha 8) merged" in evaluation.stdout
    report = json.loads((out / "report.json").read_text())
    merged = Path(report["models"]["trained"]["path"])
    assert merged.parent.parent.name == "global_step_2" and report["questions"] == 3
    # the merged weights are the base plus the trained adapter: they differ from the base model's
    from safetensors.torch import load_file

    base = load_file(next(Path(dirs["model"]).glob("*.safetensors")))
    trained = {k: v for f in merged.glob("*.safetensors") for k, v in load_file(f).items()}
    assert set(trained) == set(base)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert (trained[name] - base[name]).abs().max() > 0
    # and the adapter alone, with the run's alpha, for those who load it over the base model
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_p40.cli",
            "export",
            "--checkpoints",
            str(dirs["checkpoints"]),
            "--out",
            str(tmp_path / "exports"),
            "--lora",
            "adapter",
        ],
        env=cluster,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    adapter = tmp_path / "exports" / "global_step_2-lora-adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["lora_alpha"] == 8
    assert (adapter / "adapter_model.safetensors").is_file()


def test_sigterm_saves_the_step_in_progress_and_the_same_command_resumes_from_it(cluster, run_dirs, tmp_path):
    """`docker compose stop trainer`: SIGTERM to verl-p40 -> the training loop finishes its step, saves it and ends
    (exit 0) -> the same command continues with the next step: no step is lost or run twice."""
    import signal
    import time

    dirs = {**run_dirs, "checkpoints": tmp_path / "ckpt"}
    command = [
        *TRAIN,
        "--model",
        str(dirs["model"]),
        "--data",
        str(dirs["data"]),
        "--checkpoints",
        str(dirs["checkpoints"]),
        "--logs",
        str(tmp_path / "logs"),
        *CPU_OVERRIDES,
        "trainer.save_freq=100",
        "trainer.total_training_steps=4",
    ]
    trainer = subprocess.Popen(
        command, env=cluster, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 600
    while time.time() < deadline and trainer.poll() is None:  # stop once the first step is logged
        logs = sorted((tmp_path / "logs").glob("train-*.log"))
        if logs and read_steps(logs[0]):
            break
        time.sleep(1)
    trainer.send_signal(signal.SIGTERM)
    out, err = trainer.communicate(timeout=600)
    log = sorted((tmp_path / "logs").glob("train-*.log"))[0]
    assert trainer.returncode == 0, log.read_text()[-4000:] + err[-2000:]
    assert "stop requested" in err and "stopped on request" in err
    done = [int(s["step"]) for s in read_steps(log)]
    assert done and done == list(range(1, done[-1] + 1)) and done[-1] < 4  # stopped before the end of the run
    experiment = dirs["checkpoints"] / "model-gsm8k-ppo"
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(done[-1])
    assert not list((tmp_path / "logs").glob(".stop-requested-*"))  # the request does not outlive the run
    again = _train(cluster, dirs, tmp_path / "logs2", 4, "trainer.save_freq=100")
    log2 = _trainer_log(again, tmp_path / "logs2")
    assert [int(s["step"]) for s in read_steps(log2)] == list(range(done[-1] + 1, 5))


def test_a_zero_byte_parquet_ends_with_the_trainers_one_line(cluster, run_dirs, tmp_path):
    """The preflight would stop this; skipped by name, verl's real loop meets it and the trainer says what to do."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")
    (data / "test.parquet").write_bytes((run_dirs["data"] / "test.parquet").read_bytes())
    result = subprocess.run(
        [
            *TRAIN,
            "--model",
            str(run_dirs["model"]),
            "--data",
            str(data),
            "--checkpoints",
            str(tmp_path / "ckpt"),
            "--logs",
            str(tmp_path / "logs"),
            "--skip-check",
            "data",
            *CPU_OVERRIDES,
            "trainer.total_training_steps=1",
        ],
        env=cluster,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stdout[-3000:]
    assert last.startswith(f"verl-p40 train: error: {data / 'train.parquet'}: not a readable parquet file"), last
    assert "verl-p40 prep" in last


def test_checkpoints_on_a_full_disk_end_with_the_trainers_one_line(cluster, run_dirs, tmp_path):
    """Checkpoints written to a 2 MB tmpfs (the preflight's disk check skipped by name)."""
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(full)], capture_output=True, text=True
    )
    assert mounted.returncode == 0, f"this test needs root to mount a small tmpfs: {mounted.stderr}"
    try:
        result = subprocess.run(
            [
                *TRAIN,
                "--model",
                str(run_dirs["model"]),
                "--data",
                str(run_dirs["data"]),
                "--checkpoints",
                str(full),
                "--logs",
                str(tmp_path / "logs"),
                "--skip-check",
                "disk",
                *CPU_OVERRIDES,
                "trainer.total_training_steps=1",
                "trainer.save_freq=1",
            ],
            env=cluster,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=900,
        )
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, result.stdout[-3000:]
    assert last.startswith("verl-p40 train: error: disk full"), last
    assert "trainer.max_actor_ckpt_to_keep=1" in last


def _ray_workers(cluster, *names: str) -> list[int]:
    """The pids of this test cluster's Ray worker processes named `ray::<name>...` (its workers inherit the
    cluster's PYTHONPATH, which holds this session's patched verl)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
            environ = (proc / "environ").read_bytes()
        except (OSError, ValueError):
            continue
        if any(title.startswith(f"ray::{n}") for n in names) and cluster["PYTHONPATH"].encode() in environ:
            found.append(int(proc.name))
    return found


def _children(pid: int) -> list[int]:
    kids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def _kill_like_a_container(cluster, cli_pid: int) -> None:
    """SIGKILL to everything of the run at once, as `docker kill` does: verl-p40, verl's driver, its trainer loop
    (a Ray actor) and its workers."""
    import signal

    for pid in [*_children(cli_pid), cli_pid, *_ray_workers(cluster, "TaskRunner", "WorkerDict")]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _gone(cluster, timeout: float = 120) -> None:
    import time

    deadline = time.time() + timeout
    while _ray_workers(cluster, "TaskRunner", "WorkerDict") and time.time() < deadline:
        time.sleep(0.5)
    assert not _ray_workers(cluster, "TaskRunner", "WorkerDict"), "the killed run's Ray workers did not go"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _wait_for(predicate, timeout: float, what: str, poll: float = 0.01) -> None:
    import time

    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)


def test_sigkill_in_a_save_a_second_trainer_then_resume_and_best(cluster, run_dirs, tmp_path):
    """The faults of a run on a home server, in one run of verl's real loop (one trainer start each):

    1. while a trainer runs, a second one on the same checkpoints is refused in one line (the lock) and writes
       nothing; 2. the container is SIGKILLed in the middle of the save of step 2 (a seeded moment among the files
       it writes): step 1 stays complete and as it was, step 2 is half-written; 3. the same command resumes from
       step 1, naming step 2 as ignored, and, with one checkpoint kept, keeps the step `best` takes (step 1: its
       accuracy is set high in the run record, where the trainer keeps every validation, and every one of its
       answers right in its per-question results, so it beats step 3 beyond the noise) beside the newest;
    4. eval --compare best and export --model best take step 1 and say so."""
    import random
    import signal

    rng = random.Random(40)
    dirs = {**run_dirs, "checkpoints": tmp_path / "ckpt"}
    experiment = dirs["checkpoints"] / "model-gsm8k-ppo"
    keep = ["trainer.max_actor_ckpt_to_keep=1", "trainer.max_critic_ckpt_to_keep=1", "trainer.save_freq=1"]

    def command(name: str, steps: int) -> list[str]:
        run = [
            *TRAIN,
            "--model",
            str(dirs["model"]),
        ]
        run += ["--data", str(dirs["data"]), "--checkpoints", str(dirs["checkpoints"])]
        run += ["--logs", str(tmp_path / f"logs-{name}"), *CPU_OVERRIDES, *keep, "trainer.test_freq=1"]
        return [*run, "trainer.val_before_train=false", f"trainer.total_training_steps={steps}"]

    # 1 + 2: a trainer, a second one refused while it runs, then the first killed inside its save of step 2
    def start(name: str, steps: int, stderr) -> subprocess.Popen:
        """The trainer in the background, its console into NAME.out."""
        with open(tmp_path / f"{name}.out", "w") as out:
            return subprocess.Popen(command(name, steps), env=cluster, cwd=REPO, stdout=out, stderr=stderr, text=True)

    def train(name: str, steps: int) -> subprocess.CompletedProcess:
        return subprocess.run(command(name, steps), env=cluster, capture_output=True, text=True, cwd=REPO, timeout=900)

    first = start("a", 3, subprocess.STDOUT)
    try:
        _wait_for(lambda: list((tmp_path / "logs-a").glob("train-*.log")), 300, "the first trainer's log", 0.2)
        second = train("b", 3)
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        last = second.stderr.strip().splitlines()[-1]
        assert last.startswith(f"verl-p40 train: error: {experiment}: another trainer is training into this folder (")
        assert f"pid {first.pid} on " in last and "Traceback" not in second.stderr + second.stdout
        assert not list((tmp_path / "logs-b").glob("train-*.log"))  # the refused one started nothing
        moment = rng.choice(["actor", "actor/model_world_size_1_rank_0.pt", "actor/optim_world_size_1_rank_0.pt"])
        moment = rng.choice([moment, "critic", "critic/model_world_size_1_rank_0.pt"])
        _wait_for(lambda: (experiment / "global_step_2" / moment).exists() or first.poll() is not None, 600, moment)
        step1 = _files(experiment / "global_step_1")
        _kill_like_a_container(cluster, first.pid)
        assert first.wait(timeout=60) == -signal.SIGKILL
    finally:
        _kill_like_a_container(cluster, first.pid)
    _gone(cluster)
    assert (experiment / "latest_checkpointed_iteration.txt").read_text() == "1", (tmp_path / "a.out").read_text()
    assert _files(experiment / "global_step_1") == step1 and "verl-p40-complete" in step1
    assert not (experiment / "global_step_2" / "verl-p40-complete").exists()  # half-written, and not taken for whole

    # 3: the same command resumes from step 1, and the best step survives one-checkpoint retention
    record = json.loads((experiment / "verl-p40-run.json").read_text())
    assert "1" in record["validations"]  # every validation is kept there (step 2's too, validated before its save)
    record["validations"] = {"1": 1.0}  # the step to keep: no later step of a random tiny model scores this
    (experiment / "verl-p40-run.json").write_text(json.dumps(record))
    answers = experiment / "validation" / "1.jsonl"  # and its answers, every one right, for best's paired rule
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    answers.write_text("".join(json.dumps({**r, "score": 1.0, "acc": 1.0}) + "\n" for r in rows))
    resumed = train("c", 3)
    log = _trainer_log(resumed, tmp_path / "logs-c")
    assert (
        f"[verl-p40] resuming from {experiment / 'global_step_1'}; global_step_2 ignored (its save was cut short"
        in resumed.stderr
    )
    assert [int(s["step"]) for s in read_steps(log)] == [2, 3]
    assert "verl-p40: validation accuracy 0.0% at step 3; best: step 1 (validation accuracy 100.0%, " in log.read_text()
    assert sorted(p.name for p in experiment.glob("global_step_*")) == ["global_step_1", "global_step_3"]
    assert _files(experiment / "global_step_1") == step1
    best = json.loads((experiment / "verl-p40-run.json").read_text())["best"]
    assert best["step"] == 1 and best["latest_step"] == 3 and best["gain_over_latest"] == 1.0

    # 4: eval and export take `best` and say which step they took
    said = f"[verl-p40] best: step 1 of {experiment} (validation accuracy 100.0%"

    def cli(*args: str) -> subprocess.CompletedProcess:
        run = [sys.executable, "-m", "verl_p40.cli", *args, "--checkpoints", str(dirs["checkpoints"])]
        return subprocess.run(run, env=cluster, capture_output=True, text=True, cwd=REPO, timeout=600)

    exported = cli("export", "--model", "best", "--out", str(tmp_path / "exports"), "--dtype", "fp32")
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert said in exported.stdout and (tmp_path / "exports" / "global_step_1-hf-fp32" / "config.json").is_file()
    evaluation = cli(
        *("eval", "--model", str(dirs["model"]), "--compare", "best", "--data", str(dirs["data"] / "test.parquet")),
        *("--out", str(tmp_path / "eval"), "--device", "cpu", "--max-new-tokens", "4", "--limit", "1"),
        *("--logs", str(tmp_path / "logs-c")),
    )
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert said in evaluation.stdout
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert Path(report["models"]["trained"]["path"]).parent.parent.name == "global_step_1"


def test_a_killed_ray_worker_ends_the_run_in_one_line_and_keeps_the_checkpoint(cluster, run_dirs, tmp_path):
    """The kernel's OOM killer takes verl's worker process (SIGKILL) after step 1 was saved: the run ends, exit 2,
    with the one line, and step 1 stays complete and as it was."""
    import signal

    experiment = tmp_path / "ckpt" / "model-gsm8k-ppo"
    with open(tmp_path / "d.out", "w") as out:
        worker_run = subprocess.Popen(
            [
                *TRAIN,
                "--model",
                str(run_dirs["model"]),
            ]
            + ["--data", str(run_dirs["data"]), "--checkpoints", str(tmp_path / "ckpt"), "--logs", str(tmp_path / "l")]
            + [*CPU_OVERRIDES, "trainer.save_freq=1", "trainer.total_training_steps=4"],
            **{"env": cluster, "cwd": REPO, "stdout": out, "stderr": subprocess.PIPE, "text": True},
        )
    tracker = experiment / "latest_checkpointed_iteration.txt"
    try:
        _wait_for(lambda: tracker.exists() or worker_run.poll() is not None, 600, "step 1's checkpoint", 0.2)
        step1 = _files(experiment / "global_step_1")
        killed = _ray_workers(cluster, "WorkerDict")
        assert killed, "no Ray worker process of this cluster found"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        err = worker_run.communicate(timeout=600)[1]
    finally:
        _kill_like_a_container(cluster, worker_run.pid)
    _gone(cluster)
    output = (tmp_path / "d.out").read_text()
    said = [line for line in output.splitlines() if "Error" in line or "died" in line][-20:]
    assert worker_run.returncode == 2, "\n".join(said) + err[-2000:] + output[-1500:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("verl-p40 train: error: a Ray worker of the trainer died (killed: "), last
    assert "the same command resumes from the newest complete checkpoint" in last and "Traceback" not in err
    step = int(tracker.read_text())
    assert step >= 1 and "verl-p40-complete" in _files(experiment / f"global_step_{step}")
    if step == 1:
        assert _files(experiment / "global_step_1") == step1


def test_killed_at_ten_random_moments_of_its_saves_every_copy_resumes_from_a_complete_step(cluster, run_dirs, tmp_path):
    """SIGKILL at random moments of verl's real saves, at least 10 in one run (a trainer start per moment would cost
    CI minutes each): at a seeded random poll while a step folder has no completion marker, every process of the run
    is stopped at once (SIGSTOP: like a SIGKILL, nothing more of the run reaches the disk), the experiment folder is
    copied as the kill would leave it, and the run goes on (SIGCONT). Two more copies come from moments between saves.
    Each copy must then resume from its newest complete step (models/checkpoints.py's resume_line, what `train`
    runs), naming the half-written one; every complete step in any copy holds the same bytes as in every other copy,
    and its .pt files load. (The real trainer resuming such a copy, naming the cut step: the test above.)"""
    import hashlib
    import random
    import shutil
    import signal
    import time

    import torch

    from verl_p40.models import checkpoints
    from verl_p40.patches import p40_checkpoints as marks

    rng = random.Random(44)
    steps = 6  # 16 prompts, 4 a step: two epochs hold them
    root = tmp_path / "ckpt"
    experiment = root / "model-gsm8k-ppo"
    command = [*TRAIN]
    command += ["--model", str(run_dirs["model"]), "--data", str(run_dirs["data"]), "--checkpoints", str(root)]
    command += ["--logs", str(tmp_path / "logs"), *CPU_OVERRIDES, "trainer.save_freq=1", "trainer.test_freq=-1"]
    command += ["trainer.max_actor_ckpt_to_keep=1", "trainer.max_critic_ckpt_to_keep=1"]
    command += ["trainer.val_before_train=false", "trainer.total_epochs=2", f"trainer.total_training_steps={steps}"]

    def saving() -> int | None:
        """The step whose save is under way: its folder is there, its completion marker not yet, and it is newer
        than every complete step (an older folder without its marker is one that retention is deleting)."""
        folders = {int(f.name.removeprefix("global_step_")): f for f in experiment.glob("global_step_*")}
        done = [n for n, f in folders.items() if (f / marks.COMPLETE).exists()]
        under_way = [n for n in folders if n not in done and n > max(done, default=0)]
        return max(under_way, default=None)

    def signal_all(pids: list[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    copies: list[tuple[Path, int | None]] = []  # (the copy, the step whose save it cut; None: between saves)
    cut: dict[int, int] = {}
    spread: list[int | None] = []  # files of the cut step on disk at each moment: where in the save it fell
    with open(tmp_path / "run.out", "w") as out:
        run = subprocess.Popen(command, env=cluster, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    try:
        deadline = time.time() + 600
        while run.poll() is None and time.time() < deadline:
            step = saving() if experiment.is_dir() else None
            # saves of steps 2..6 (step 1 has no complete step before it), at most 3 moments each, at random polls
            pick = step is not None and step >= 2 and cut.get(step, 0) < 3 and rng.random() < 0.05
            between = step is None and (experiment / marks.MARKED).exists() and rng.random() < 0.002
            if pick or (between and sum(s is None for _, s in copies) < 2):
                pids = pids or [run.pid, *_children(run.pid), *_ray_workers(cluster, "TaskRunner", "WorkerDict")]
                signal_all(pids, signal.SIGSTOP)
                try:
                    step = saving()  # what is on disk now, frozen
                    copy = tmp_path / "copies" / str(len(copies)) / experiment.name
                    shutil.copytree(experiment, copy, symlinks=True)
                finally:
                    signal_all(pids, signal.SIGCONT)
                copies.append((copy, step))
                spread.append(len(list((copy / f"global_step_{step}").rglob("*"))) if step else None)
                if step is not None:
                    cut[step] = cut.get(step, 0) + 1
            time.sleep(rng.uniform(0, 0.003))
        assert run.wait(timeout=120) == 0, (tmp_path / "run.out").read_text()[-4000:]
    finally:
        signal_all(pids, signal.SIGCONT)
        if run.poll() is None:
            _kill_like_a_container(cluster, run.pid)
    in_saves = [c for c, s in copies if s is not None]
    assert len(in_saves) >= 10, f"only {len(in_saves)} moments inside a save ({cut}); {len(copies)} copies in all"
    print(f"moments: {len(copies)} copies, cut saves {cut}, files of the cut step at each: {spread}")

    seen: dict[tuple[int, str], str] = {}  # (step, file) -> sha256, across every copy
    for copy, step in copies:
        done = checkpoints.complete_steps(copy)
        assert done and done[-1] >= 1, copy
        if step is not None:
            assert done[-1] == step - 1 and step not in done, (copy, step, done)  # the cut step is not taken
        line = checkpoints.resume_line(copy)
        assert f"global_step_{done[-1]}" in line and "resuming from" in line and "from the start" not in line, line
        ignored = checkpoints.half_written(copy)
        assert (f"global_step_{step} ignored" in line) == (step is not None and f"global_step_{step}" in ignored), line
        assert (copy / checkpoints.TRACKER).read_text().strip() == str(done[-1])  # what verl reads on resume
        for finished in done:
            folder = copy / f"global_step_{finished}"
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                assert seen.setdefault((finished, str(path.relative_to(folder))), digest) == digest, path
                if path.suffix == ".pt":
                    torch.load(path, map_location="cpu", weights_only=False)
