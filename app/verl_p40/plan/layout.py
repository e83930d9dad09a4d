"""How many GPUs and hosts a run uses, and what that changes in verl's config.

- This host's GPUs: every GPU NVML reports, or those `--gpus` (VERL_P40_GPUS; GPUS= in compose's .env) names, as NVML
  numbers them ("0,1"). With `all`, a card unfit to train beside the others is left out with a line naming it: one
  older than the oldest supported architecture, or with less than half the largest card's memory (a display card
  beside P40s, which have no video output); and with the recipe's batch (`--batch recipe`) the count is taken down
  to a power of two (3 P40s: GPUs 0 and 1), since the recipes' sequences a step split evenly over 1, 2, 4 or 8 GPUs
  only; `--batch per-gpu` uses them all. No 3-GPU host was at hand to run either; the plans are tested.
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
  the memory plan's choice (verl_p40.plan.memory_plan, by verl_p40.plan.memory's model). Mixed cards: the profile is
  the oldest card's (`weakest`), the memory the smallest card's (`smallest`), which may be a newer one.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan.workload import GPUS_KEYS

BATCH_MODES = ("recipe", "per-gpu")
BATCH_KEYS = ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size", "critic.ppo_mini_batch_size")


@dataclass(frozen=True)
class Layout:
    gpus: tuple[GPUInfo, ...]  # this host's GPUs the trainer uses
    nodes: int = 1
    subset: bool = False  # fewer than every GPU of the host
    left_out: str | None = None  # with `all`: which GPUs were left out and why, in a line

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


def choose(gpus: list[GPUInfo] | None, wanted: tuple[int, ...] | None, nodes: int = 1, batch: str = "recipe") -> Layout:
    """The layout for `gpus` (None: no driver here) restricted to the indices `wanted` (`--gpus`; None: all), on
    `nodes` hosts; with all, the GPUs fit to train together (`usable`) for the batch mode."""
    spec = ",".join(map(str, wanted or ()))  # as the errors name it
    if gpus is None:
        if wanted is not None:
            raise UserError(
                f"--gpus {spec}: no GPU driver (NVML) here to check it against; leave it at all (with compose: "
                "GPUS=all in .env)"
            )
        return Layout((), nodes)
    if wanted is None:
        chosen, why = usable(gpus, batch)
        return Layout(chosen, nodes, subset=len(chosen) < len(gpus), left_out=why)
    have = {g.index: g for g in gpus}
    missing = [i for i in wanted if i not in have]
    if missing:
        raise UserError(
            f"--gpus {spec}: this host has no GPU {', '.join(map(str, missing))} "
            f"(it has {', '.join(str(g.index) for g in gpus)}); name GPUs it has (--gpus; with compose GPUS= in .env, "
            f"e.g. GPUS={','.join(str(g.index) for g in gpus[:2])})"
        )
    chosen = tuple(have[i] for i in wanted)
    return Layout(chosen, nodes, subset=len(chosen) < len(gpus))


def usable(gpus: list[GPUInfo], batch: str = "recipe") -> tuple[tuple[GPUInfo, ...], str | None]:
    """The GPUs `all` trains on, and the line that names those left out (None: none): cards older than the oldest
    supported architecture or with less than half the largest card's memory go, then, with the recipe's batch, the
    last ones past a power of two."""
    from verl_p40.plan import capabilities

    oldest, largest = capabilities.MIN_SM["supported"], max(g.memory_total_gib for g in gpus)
    reasons = {}
    for g in gpus:
        if capabilities.of(*g.compute_capability) < oldest:
            reasons[g.index] = f"older than {capabilities.name(oldest)}"
        elif g.memory_total_gib < largest / 2:
            reasons[g.index] = f"{g.memory_total_gib:.1f} GiB, under half the {largest:.1f} GiB of the largest"
    fit = [g for g in gpus if g.index not in reasons] or list(gpus)  # none fit: plan them all, the plan says why
    reasons = {i: why for i, why in reasons.items() if i not in {g.index for g in fit}}
    if batch == "recipe" and len(fit) not in (1, 2, 4, 8):
        keep = 1 << (min(len(fit), 8).bit_length() - 1)
        for g in fit[keep:]:
            reasons[g.index] = (
                f"the recipe's sequences a step split evenly over 1, 2, 4 or 8 GPUs, so {keep} of these "
                f"{len(fit)} train (BATCH=per-gpu / --batch per-gpu trains on all {len(fit)}, each GPU its own batch)"
            )
        fit = fit[:keep]
    if not reasons:
        return tuple(fit), None
    named = "; ".join(f"GPU {g.index} ({g.name}): {reasons[g.index]}" for g in gpus if g.index in reasons)
    using = ",".join(str(g.index) for g in fit)
    return tuple(fit), (
        f"GPUs {using} of {len(gpus)} train, left out: {named}; GPUS={using} in .env (--gpus {using}) says so "
        "explicitly, GPUS= picks others"
    )


def weakest(gpus: tuple[GPUInfo, ...] | list[GPUInfo]) -> GPUInfo:
    """The GPU whose features a run across them is planned for (the profile): the lowest compute capability, then the
    least memory. Its memory is not the run's: a newer card beside it may have less (`smallest`)."""
    return min(gpus, key=lambda g: (g.compute_capability, g.memory_total_gib))


def smallest(gpus: tuple[GPUInfo, ...] | list[GPUInfo]) -> GPUInfo:
    """The GPU whose memory a run across them must fit on each card: the smallest, whatever its compute capability
    (a V100-16GB beside a P40 holds 16 GiB, not the P40's 24); `weakest` is the oldest, for the features."""
    return min(gpus, key=lambda g: g.memory_total_gib)


def env(layout: Layout) -> dict[str, str]:
    """The trainer's environment: CUDA sees the chosen GPUs, numbered as NVML numbers them."""
    if not layout.subset:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in layout.gpus)}


def settings(layout: Layout) -> tuple[dict[str, int], list[str]]:
    """{verl key: value} for the layout (GPU and host counts) and its note."""
    counts = dict(zip(GPUS_KEYS, (layout.per_node, layout.nodes)))
    notes = [f"layout: {layout.describe()}, {layout.world} in all"]
    return counts, notes + ([f"layout: {layout.left_out}"] if layout.left_out else [])


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
