"""What every trainer worker process sets before it builds a model: the memory cap (`verl_p40.memcap`), TF32
matmuls, cuDNN attention. Importing this module applies all three.

verl has no key for any of them, and each must hold in each Ray worker, not in the CLI's process: `verl-p40 train`
names this module (`defaults.WORKER_HOOKS_MODULE`) in verl's `actor_rollout_ref.model.external_lib`, which every
verl FSDP worker imports in `init_model` before it builds a model, when one of them is asked for.
"""

from __future__ import annotations

import os

from verl_p40 import memcap
from verl_p40.defaults import NO_CUDNN_ATTENTION_ENV, TF32_ENV


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


memcap.apply()
apply_tf32()
apply_attention()
