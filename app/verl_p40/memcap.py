"""What every trainer worker process sets before it builds a model: the memory cap, TF32 matmuls, cuDNN attention.

verl has no key for any of them, and each must hold in each Ray worker, not in the CLI's process: `verl-p40 train`
names this module in verl's `actor_rollout_ref.model.external_lib` when one is asked for.

Memory: cap PyTorch's GPU memory per process, to size a run for a smaller card (a 24 GB P40 on a bigger GPU).

`verl-p40 train --gpu-memory-cap-gb N` sets `VERL_P40_GPU_MEMORY_CAP_GB=N` and names this module in verl's
`actor_rollout_ref.model.external_lib`, which every verl FSDP worker imports in `init_model` before it builds a
model. Importing it caps the worker's CUDA caching allocator at N * 10^9 bytes through
`torch.cuda.set_per_process_memory_fraction`; allocations beyond it raise CUDA out-of-memory as they would on
the smaller card. The CUDA context and NCCL buffers (a few hundred MB) are outside the allocator and the cap.
"""

from __future__ import annotations

import os

from verl_p40.defaults import GPU_MEMORY_CAP_ENV as ENV
from verl_p40.defaults import GPU_MEMORY_CAP_MIN_GB, NO_CUDNN_ATTENTION_ENV, TF32_ENV
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


def apply_tf32() -> bool:
    """TF32 for fp32 matmuls and convolutions when `VERL_P40_WORKER_TF32=1` (set by `verl-p40 train` on sm_80+ only: the
    tensor cores then run the fp32 plan's matmuls with a 10-bit mantissa, the trade every fp32 trainer on these
    cards makes; PyTorch leaves it off by default). True when it was switched on."""
    if os.environ.get(TF32_ENV) != "1":
        return False
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(f"[verl-p40] pid {os.getpid()}: TF32 matmuls on")
    return True


def apply_attention() -> bool:
    """cuDNN's scaled-dot-product attention off when `VERL_P40_WORKER_NO_CUDNN_ATTENTION=1` (set by `verl-p40 train` on
    sm_80+, where PyTorch may pick it for bf16/fp16), a precaution: its backward with an attention mask is reported to
    give NaN gradients on sm_90 (pytorch/pytorch#196678; not shown by bench/sdpa_nan_check.py's small case). SDPA then
    runs FlashAttention or the memory-efficient kernel; fp32 never used cuDNN's. True when it was switched off."""
    if os.environ.get(NO_CUDNN_ATTENTION_ENV) != "1":
        return False
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)
    print(f"[verl-p40] pid {os.getpid()}: cuDNN attention off")
    return True


apply()
apply_tf32()
apply_attention()
