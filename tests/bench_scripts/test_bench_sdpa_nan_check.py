"""The SDPA check's case (bench/sdpa_nan_check.py) on a CPU: a left-padded causal batch with HF's additive mask runs
forward and backward, and the counts are of non-finite entries (0 where the math kernel is exact)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sdpa_nan_check  # noqa: E402


def test_a_padded_batch_through_the_math_kernel_has_finite_gradients_and_a_refusal_is_recorded():
    import torch
    from torch.nn.attention import SDPBackend

    row = sdpa_nan_check.case(torch, 192, SDPBackend.MATH, torch.float32, device="cpu")
    assert row == {"out_nonfinite": 0, "grad_q_nonfinite": 0, "grad_k_nonfinite": 0, "grad_v_nonfinite": 0}
    refused = sdpa_nan_check.case(torch, 192, SDPBackend.CUDNN_ATTENTION, torch.float32, device="cpu")
    assert set(refused) == {"error"} and refused["error"]
