"""How many GPUs and hosts a run uses, and what that changes in verl's config.

- This host's GPUs: every GPU NVML reports, or those `--gpus` (VERL_P40_GPUS) names, as NVML numbers them ("0,1").
  The trainer then sees exactly those (CUDA_VISIBLE_DEVICES, with CUDA numbering GPUs in NVML's PCI order), and
  verl's `trainer.n_gpus_per_node` is their count. Every host of a cluster is assumed to have as many (verl's own
  assumption).
- Hosts: `trainer.nnodes` is `--nodes` (VERL_P40_NODES); above 1 the trainer joins the Ray cluster at RAY_ADDRESS
  (`verl-p40 cluster head` / `join`).
- Batch (`--batch`, VERL_P40_BATCH): by default (`recipe`) a step takes the recipe's prompts whatever the GPU count,
  split over the W = GPUs x hosts GPUs: the learning per step that was measured on one GPU (grpo-gsm8k: +9.0
  held-out points at step 60, bench/results/horizon-2026-12-03), in shorter steps. `per-gpu` multiplies
  `data.train_batch_size` and the actor's and critic's `ppo_mini_batch_size` by W instead: each GPU does the work it
  does alone, and a step takes W times the prompts (a recipe whose learning was not measured). Micro-batches are
  per GPU either way (the memory plan's).
- Memory: FSDP shards the weights, gradients and Adam states over the W GPUs; which of them then stay on each GPU is
  the memory plan's choice (verl_p40.plan.memory, the plan's `memory_plan` step).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo, parse_gpus
from verl_p40.plan.workload import GPUS_KEYS

BATCH_MODES = ("recipe", "per-gpu")
BATCH_KEYS = ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size", "critic.ppo_mini_batch_size")


@dataclass(frozen=True)
class Layout:
    gpus: tuple[GPUInfo, ...]  # this host's GPUs the trainer uses
    nodes: int = 1
    subset: bool = False  # fewer than every GPU of the host

    @property
    def per_node(self) -> int:
        return len(self.gpus) or 1  # no driver here (a config made on another machine): the profile's one GPU

    @property
    def world(self) -> int:
        return self.per_node * self.nodes

    def describe(self) -> str:
        which = f" ({', '.join(str(g.index) for g in self.gpus)})" if self.gpus else " (none seen here)"
        host = f"{self.per_node} GPU{'s' * (self.per_node > 1)}{which}"
        return host + (f" on each of {self.nodes} hosts" if self.nodes > 1 else "")


def choose(gpus: list[GPUInfo] | None, spec: str, nodes: int = 1) -> Layout:
    """The layout for `gpus` (None: no driver here) restricted by `spec`, on `nodes` hosts."""
    wanted = parse_gpus(spec)
    if gpus is None:
        if wanted is not None:
            raise UserError(f"--gpus {spec}: no GPU driver (NVML) here to check it against; leave it at all")
        return Layout((), nodes)
    if wanted is None:
        return Layout(tuple(gpus), nodes)
    have = {g.index: g for g in gpus}
    missing = [i for i in wanted if i not in have]
    if missing:
        raise UserError(
            f"--gpus {spec}: this host has no GPU {', '.join(map(str, missing))} "
            f"(it has {', '.join(str(g.index) for g in gpus)})"
        )
    chosen = tuple(have[i] for i in wanted)
    return Layout(chosen, nodes, subset=len(chosen) < len(gpus))


def weakest(gpus: tuple[GPUInfo, ...] | list[GPUInfo]) -> GPUInfo:
    """The GPU a run across them must be sized for: the lowest compute capability, then the least memory."""
    return min(gpus, key=lambda g: (g.compute_capability, g.memory_total_gib))


def env(layout: Layout) -> dict[str, str]:
    """The trainer's environment: CUDA sees the chosen GPUs, numbered as NVML numbers them."""
    if not layout.subset:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in layout.gpus)}


def settings(layout: Layout) -> tuple[dict[str, int], list[str]]:
    """{verl key: value} for the layout (GPU and host counts) and its note."""
    counts = dict(zip(GPUS_KEYS, (layout.per_node, layout.nodes)))
    return counts, [f"layout: {layout.describe()}, {layout.world} in all"]


def batch(layout: Layout, verl: dict, mode: str = "recipe") -> tuple[dict[str, int], list[str]]:
    """The batches of `verl` (BATCH_KEYS, in sequences) scaled by the world size with `mode` per-gpu ({} with the
    recipe's batch, split over the GPUs), and a note on it."""
    from omegaconf import OmegaConf

    if layout.world == 1:
        return {}, []
    if mode == "recipe":
        return {}, [
            f"batch: the recipe's, split over {layout.world} GPUs (--batch per-gpu: {layout.world}x the prompts a step)"
        ]
    tree, out = OmegaConf.create(verl), {}
    for key in BATCH_KEYS:
        value = OmegaConf.select(tree, key)
        if value is not None:
            out[key] = int(value) * layout.world
    note = (
        f"batch x{layout.world} (--batch per-gpu: the recipe's work on each GPU): "
        f"{out.get('data.train_batch_size')} sequences a step"
    )
    return out, [note]
