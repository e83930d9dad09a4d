"""The memory cap of every trainer worker process: cap PyTorch's GPU memory per process, to size a run for a smaller
card (a 24 GB P40 on a bigger GPU). Applied by `verl_p40.worker_hooks`, the module verl's workers import; importing
this module applies nothing.

The user asks with `--gpu-memory-cap-gb N` (or `$VERL_P40_GPU_MEMORY_CAP_GB`), read and checked once where the option
is read (`defaults.GPU_MEMORY_CAP_MIN_GB`). `verl-p40 train`'s plan hands the checked value to its workers under a
name of their own, `VERL_P40_WORKER_MEMORY_CAP_GB` (`defaults.WORKER_MEMORY_CAP_ENV`; the trainer drops any such
variable left in the shell, so only the plan sets it), and names `verl_p40.worker_hooks` in verl's
`actor_rollout_ref.model.external_lib`, which every verl FSDP worker imports in `init_model` before it builds a
model. `apply()` then caps the worker's CUDA caching allocator at N * 10^9 bytes through
`torch.cuda.set_per_process_memory_fraction`; allocations beyond it raise CUDA out-of-memory as they would on
the smaller card. The CUDA context and NCCL buffers (a few hundred MB) are outside the allocator and the cap.
"""

from __future__ import annotations

import os

from verl_p40.defaults import WORKER_MEMORY_CAP_ENV as ENV


def fraction_for(cap_gb: float, total_bytes: int) -> float:
    """The share of a device of `total_bytes` that a cap of `cap_gb` GB leaves the allocator (all of it at most)."""
    return min(1.0, cap_gb * 1e9 / total_bytes)


def apply() -> float | None:
    """Apply the plan's cap from the environment to the current CUDA device; the fraction set, or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(device).total_memory
    cap = float(value)  # written by the plan from the checked option
    fraction = fraction_for(cap, total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    print(f"[verl-p40] pid {os.getpid()}: GPU memory capped at {cap:g} GB ({fraction:.4f} of cuda:{device})")
    return fraction
