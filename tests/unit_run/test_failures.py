"""The trainer's one line at the end of a failed run: out of memory (which phase, which setting), a bad parquet,
a full disk. The out-of-memory case is a verl traceback recorded on the GPU machine (bench/results/generations-*);
the parquet and disk cases run verl's real loop on the CPU (tests/unit_run/test_trainer_cpu.py)."""

from pathlib import Path

from verl_p40.run.failures import Diagnosis

DATA = Path(__file__).resolve().parents[1] / "data"


def _diagnose(lines):
    diagnosis = Diagnosis()
    for line in lines:
        diagnosis.feed(line)
    return diagnosis.summary()


def test_out_of_memory_in_update_actor_from_a_recorded_verl_traceback():
    said = _diagnose((DATA / "verl-oom-update-actor.log").read_text().splitlines())
    assert said == (
        "CUDA out of memory in the actor's update (tried to allocate 1.84 GiB with 14.90 GiB allowed): "
        "lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, or give the run a bigger card or a "
        "larger --gpu-memory-cap-gb"
    )


def test_other_phases_and_causes():
    assert "the critic's values" in _diagnose(
        [
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.critic_compute_values() (pid=1)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    assert _diagnose(
        ["OSError: [Errno 28] No space left on device: '/checkpoints/x/global_step_5/actor/model.pt'"]
    ).startswith("disk full writing /checkpoints/x/global_step_5/actor/model.pt: free space")
    said = _diagnose(
        [
            "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_save_checkpoint() (pid=2)",
            "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 9984 vs 9878",
        ]
    )
    assert said.startswith("disk full writing a checkpoint: free space")  # torch.save's words for ENOSPC
    said = _diagnose(['  File "/data/gsm8k/train.parquet"', "pyarrow.lib.ArrowInvalid: Parquet file size is 0 bytes"])
    assert said.startswith("/data/gsm8k/train.parquet: not a readable parquet file") and "verl-p40 prep" in said
    assert _diagnose(["step:1 - critic/score/mean:0.5", "KeyboardInterrupt"]) is None


def test_a_worker_that_died_is_named_with_the_resume():
    """What Ray prints in the driver when a worker process is SIGKILLed (the kernel's OOM killer) during a step."""
    said = _diagnose(
        [
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
            "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
        ]
    )
    assert said.startswith("a Ray worker of the trainer died (killed: on a P40 host usually the kernel's out-of-")
    assert said.endswith("the same command resumes from the newest complete checkpoint")
    assert _diagnose(["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."])


def test_the_fixes_are_phrased_for_the_compose_trainer(monkeypatch):
    """Under compose (VERL_P40_SERVICE=trainer) the user types `docker compose ...`, not `verl-p40 ...`."""
    died = ["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
    monkeypatch.setenv("VERL_P40_SERVICE", "trainer")
    said = _diagnose(died)
    assert "`docker compose run --rm --no-deps doctor` says how much a run needs" in said
    assert said.endswith("`docker compose up -d trainer` resumes from the newest complete checkpoint")
    assert "verl-p40" not in said
    full = _diagnose(["OSError: [Errno 28] No space left on device"])
    assert "`docker compose run --rm --no-deps doctor`" in full and "verl-p40" not in full
