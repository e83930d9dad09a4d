"""The memory cap of every trainer worker process: cap PyTorch's GPU memory per process, to size a run for a smaller
card (a 24 GB P40 on a bigger GPU). Applied by `verl_p40.worker_hooks`, the module verl's workers import; importing
this module applies nothing, so the CLI may read the cap's rule from here.

`verl-p40 train --gpu-memory-cap-gb N` sets `VERL_P40_GPU_MEMORY_CAP_GB=N` and names `verl_p40.worker_hooks` in verl's
`actor_rollout_ref.model.external_lib`, which every verl FSDP worker imports in `init_model` before it builds a
model. `apply()` then caps the worker's CUDA caching allocator at N * 10^9 bytes through
`torch.cuda.set_per_process_memory_fraction`; allocations beyond it raise CUDA out-of-memory as they would on
the smaller card. The CUDA context and NCCL buffers (a few hundred MB) are outside the allocator and the cap.
"""

from __future__ import annotations

import os

from verl_p40.defaults import GPU_MEMORY_CAP_ENV as ENV
from verl_p40.defaults import GPU_MEMORY_CAP_MIN_GB
from verl_p40.options import number_problem


def cap_gb(text: str | float) -> float:
    """The cap `$VERL_P40_GPU_MEMORY_CAP_GB` asks for, by the option's own rule (a finite number of GB from
    defaults.GPU_MEMORY_CAP_MIN_GB; NaN would apply no cap). `verl-p40 train` only passes values its option took."""
    value, problem = number_problem(text, float, low=GPU_MEMORY_CAP_MIN_GB)
    if problem:
        raise ValueError(f"${ENV}: {problem}; give the cap in GB, e.g. 24")
    return value


def fraction_for(cap: str | float, total_bytes: int) -> float:
    return min(1.0, cap_gb(cap) * 1e9 / total_bytes)


def apply() -> float | None:
    """Apply the cap from the environment to the current CUDA device; the fraction set, or None."""
    value = os.environ.get(ENV)
    if not value:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(device).total_memory
    cap = cap_gb(value)
    fraction = fraction_for(cap, total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    print(f"[verl-p40] pid {os.getpid()}: GPU memory capped at {cap:g} GB ({fraction:.4f} of cuda:{device})")
    return fraction
