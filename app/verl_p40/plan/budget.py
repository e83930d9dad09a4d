"""What a run will need besides the GPU: disk for its checkpoints and host memory for offloaded state.

Estimates from the model's own config.json (its parameter count; `plan/inputs.py` reads it) and the run's verl
config; `doctor` compares them with what the machine has. They are estimates of the large terms only (fp32 weights
and Adam states), stated as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_p40.plan.workload import Workload

FP32 = 4  # bytes per parameter
ADAM_STATES = 2  # exp_avg and exp_avg_sq, fp32 each
# Host memory besides the offloaded state, measured as every process's resident memory during the default recipe's
# bench on one GPU under the Pascal mask (bench/results/timing-pair-2026-12-06/host-memory.json, bench/host_memory.py),
# each rounded up to 0.1 GB: the verl-p40 CLI, verl's driver and its dataloader workers, Ray's TaskRunner and its own
# processes (5.17 GB), and the one GPU worker (Ray's WorkerDict: actor, rollout and reference in one process a GPU,
# 8.18 GB at its peak less the 1.98 GB of reference weights the plan kept in host memory: 6.20 GB). Ray starts a worker
# a GPU, so that part is paid per card; never measured with more than one: an estimate for 2-4 cards.
HOST_FIXED_BYTES = int(5.2e9)
HOST_PER_GPU_WORKER_BYTES = int(6.3e9)


def parameter_count(config: dict[str, Any]) -> int:
    """Parameters of a decoder-only transformer (Qwen2/Llama layout) from its Hugging Face config."""
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    bias = 1 if config.get("model_type") == "qwen2" else 0  # Qwen2 has q/k/v biases
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    attention += bias * (heads * head_dim + 2 * kv_heads * head_dim)
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + embeddings + hidden


@dataclass(frozen=True)
class Needs:
    checkpoint_bytes: int  # one global_step_N folder (actor + critic)
    checkpoints_kept: int
    disk_bytes: int  # free space the run needs under the checkpoint folder
    host_bytes: int  # host memory: fixed + a worker a GPU + the offloaded state
    notes: list[str]
    host_fixed_bytes: int = HOST_FIXED_BYTES  # the CLI, verl's driver and Ray's own processes
    host_workers: int = 1  # Ray's GPU workers on this host (one a GPU)
    host_worker_bytes: int = HOST_PER_GPU_WORKER_BYTES  # each, less the offloaded state

    @property
    def host_offloaded_bytes(self) -> int:
        """The offloaded state (FSDP shards it over the cards: counted once, not per worker)."""
        return self.host_bytes - self.host_fixed_bytes - self.host_workers * self.host_worker_bytes


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, dotted, default=default)
    return default if value is None else value


def needs(cfg: Any, parameters: int) -> Needs:
    """Disk and host memory for a run of verl config `cfg` (the composed config) on a model of `parameters`."""
    run = Workload.of(cfg)
    lora, uses_critic = run.lora, run.critic
    model_state = parameters * FP32
    optim_state = parameters * FP32 * ADAM_STATES
    actor = model_state + (0 if lora else optim_state)
    critic = (model_state + optim_state) if uses_critic else 0
    checkpoint = actor + critic
    kept = _get(cfg, "trainer.max_actor_ckpt_to_keep", None)
    save_freq = int(_get(cfg, "trainer.save_freq", -1))
    notes = []
    if save_freq <= 0:
        kept_n = 0
    elif kept is None:
        steps = _get(cfg, "trainer.total_training_steps", None)
        kept_n = max(1, int(steps) // save_freq) if steps else 10
        notes.append("trainer.max_actor_ckpt_to_keep is unset: every checkpoint is kept")
    else:
        kept_n = int(kept)
    # the new checkpoint is written before the oldest goes (patches/p40_checkpoints.py), and the best validated step
    # is kept beside the newest ones: two more than kept, at most
    disk = checkpoint * (kept_n + 2) if kept_n else 0

    workers = int(run.gpus_per_node)  # this host's GPUs: Ray runs one worker process on each
    host = HOST_FIXED_BYTES + workers * HOST_PER_GPU_WORKER_BYTES
    if run.on_host("actor_params"):
        host += model_state
    if run.on_host("actor_optimizer") and not lora:
        host += optim_state
    if run.on_host("reference_params") and not lora:
        host += model_state
    if uses_critic:
        if run.on_host("critic_params"):
            host += model_state
        if run.on_host("critic_optimizer"):
            host += optim_state
    return Needs(checkpoint, kept_n, disk, host, notes, host_workers=workers)


def gb(n: int | float) -> str:
    return f"{n / 1e9:.1f} GB"
