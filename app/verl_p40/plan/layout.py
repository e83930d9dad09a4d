"""How many GPUs and hosts a run uses, and what that changes in verl's config.

- This host's GPUs: every GPU NVML reports, or those `--gpus` (VERL_P40_GPUS) names, as NVML numbers them ("0,1").
  The trainer then sees exactly those (CUDA_VISIBLE_DEVICES, with CUDA numbering GPUs in NVML's PCI order), and
  verl's `trainer.n_gpus_per_node` is their count. Every host of a cluster is assumed to have as many (verl's own
  assumption).
- Hosts: `trainer.nnodes` is `--nodes` (VERL_P40_NODES); above 1 the trainer joins the Ray cluster at RAY_ADDRESS
  (`verl-p40 cluster head` / `join`).
- Batch: a profile is sized for one GPU. With W = GPUs x hosts, `data.train_batch_size` and the actor's and
  critic's `ppo_mini_batch_size` are multiplied by W and the per-GPU micro-batches are kept: each GPU does the work
  it does alone, and a step takes W times the prompts.
- Memory: FSDP shards the weights, gradients and Adam states over the W GPUs; see `unoffload` for what the profile
  then keeps on the GPU instead of offloading it.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo, parse_gpus

# (config key, the state it holds, bytes per parameter), cheapest to keep on the GPU first
OFFLOADS = (
    ("critic.model.fsdp_config.optimizer_offload", "critic Adam states", 8),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", "actor Adam states", 8),
    ("actor_rollout_ref.ref.fsdp_config.param_offload", "reference weights", 4),
    ("critic.model.fsdp_config.param_offload", "critic weights and gradients", 8),
)
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
    if nodes < 1:
        raise UserError("--nodes must be at least 1")
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


def settings(layout: Layout, verl: dict) -> tuple[dict[str, int], list[str]]:
    """{verl key: value} for the layout (GPU and host counts, batches scaled by the world size) and notes."""
    from omegaconf import OmegaConf

    tree = OmegaConf.create(verl)
    out: dict[str, int] = {"trainer.n_gpus_per_node": layout.per_node, "trainer.nnodes": layout.nodes}
    notes = [f"layout: {layout.describe()}, {layout.world} in all"]
    if layout.world > 1:
        for key in BATCH_KEYS:
            value = OmegaConf.select(tree, key)
            if value is not None:
                out[key] = int(value) * layout.world
        notes.append(
            f"batch x{layout.world} (the profile's per-GPU work on each GPU): "
            f"{out.get('data.train_batch_size')} sequences a step"
        )
    return out, notes


def headroom_gb(layout: Layout, measured: dict[str, float], parameters: int, cap_gb: float | None) -> float:
    """Room left on each GPU by the profile's one-GPU measurement: the card (the smallest of the GPUs, the cap and the
    card it was measured on) minus the worker's measured peak, plus what sharding the actor's weights and gradients
    (8 bytes a parameter) W ways gives back."""
    card = min([g.memory_total_gib * 2**30 / 1e9 for g in layout.gpus] + [cap_gb or float("inf"), measured["card_gb"]])
    return card - measured["worker_peak_gb"] + 8 * parameters * (1 - 1 / layout.world) / 1e9


def unoffload(
    layout: Layout, verl: dict, parameters: int | None, measured: dict[str, float], cap_gb: float | None
) -> tuple[dict[str, bool], list[str]]:
    """States the profile offloads that fit on the GPU once sharded W ways: each state (bytes per parameter / W) is
    kept on the GPU, cheapest first, while the sum stays within `headroom_gb`. Only for the model size the profile
    was measured with (`measured`, from its yaml). Returns {offload key: False} and notes."""
    from omegaconf import OmegaConf

    if layout.world < 2 or not measured:
        return {}, []
    if not parameters or abs(parameters - measured["model_parameters"]) > 0.01 * measured["model_parameters"]:
        return {}, [
            f"offloading as the profile says: its memory was measured with "
            f"{measured['model_parameters'] / 1e6:.0f}M parameters, not this model's"
        ]
    room = headroom_gb(layout, measured, parameters, cap_gb)
    tree = OmegaConf.create(verl)
    out, notes, used = {}, [], 0.0
    for key, what, per_parameter in OFFLOADS:
        if OmegaConf.select(tree, key) is not True:
            continue
        size = per_parameter * parameters / layout.world / 1e9
        if used + size > room:
            notes.append(f"{what} stay offloaded ({size:.1f} GB a GPU would not fit the {room:.1f} GB left)")
            continue
        used += size
        out[key] = False
        notes.append(f"{what} kept on the GPU: {size:.1f} GB a GPU when sharded {layout.world} ways")
    return out, notes
