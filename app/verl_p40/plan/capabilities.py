"""The compute capability each GPU feature needs, in one table: the plan's engines, TF32 and cuDNN attention, the
profiles, the doctor's torch-build check and the evaluation's engine and dtype read it from here."""

from __future__ import annotations

MIN_SM = {
    "supported": 6.0,  # the oldest GPU the product plans for: torch's sm_60 code runs on a P40's sm_61
    "vllm": 7.0,  # vLLM 0.8.5 has no kernels below sm_70
    "triton": 7.0,  # Triton (and torch.compile, which uses it) refuses or miscompiles below sm_70
    "bf16": 8.0,  # bf16 arithmetic: Ampere and newer
    "tf32": 8.0,  # TF32 tensor cores: Ampere and newer
    "cudnn_attention": 8.0,  # where PyTorch may pick cuDNN's attention (for bf16/fp16), which the workers switch off
}


def has(feature: str, sm: float | None) -> bool:
    """Whether a GPU of compute capability `sm` (None: no GPU seen) has `feature` (a key of MIN_SM)."""
    return sm is not None and sm >= MIN_SM[feature]


def of(major: int, minor: int) -> float:
    """torch's and NVML's (major, minor) as the table's number: (6, 1) -> 6.1."""
    return major + minor / 10


def name(sm: float) -> str:
    """6.1 -> 'sm_61'."""
    return f"sm_{sm * 10:.0f}"
