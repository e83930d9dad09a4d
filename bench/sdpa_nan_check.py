"""GPU check (the modern-cards issue): does SDPA's backward give non-finite gradients in bf16 for a batch shaped like
verl's padded training batches, and does the worker hook's setting (cuDNN attention off) avoid it?

The suspect for the NaN gradient norms of 2026-11-30 (bf16, unmasked H200, torch 2.11, padding not trimmed): a cuDNN
SDPA backward bug reported upstream (pytorch/pytorch#196678: sm_90, an explicit attention mask, a sequence length of
64 modulo 128, a query row whose log-sum-exp is very negative; a fully masked padding row is one). That run's width
was 320 + 256 = 576 = 4 x 128 + 64. This script needs only torch and a GPU (no verl, no model):

    python3 bench/sdpa_nan_check.py --out $OUT/sdpa-nan-check.json

For each width and backend it runs one forward and backward of a left-padded causal batch with HF's additive mask
(0 where attended, the dtype's minimum elsewhere) and counts the non-finite entries of each gradient.

Result on an H200 (torch 2.11.0+cu130, cuDNN 9.19), 2026-12-01: no non-finite value for any width, kernel or dtype
(bench/results/precision-2026-12-01/sdpa-nan-check.json): the suspect did not show in this small shape
(2 rows, 2 heads of 64, no grouped keys).
"""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext
from pathlib import Path

WIDTHS = (512, 576, 640, 704)  # 576 and 704 are 64 modulo 128
PADDING = 100  # the second row's left padding (a shorter prompt), so its first 100 query rows see no key


def case(torch, width: int, backend, dtype, device: str = "cuda") -> dict:
    from torch.nn.attention import sdpa_kernel

    torch.manual_seed(0)
    batch, heads, dim = 2, 2, 64
    q, k, v = (
        torch.randn(batch, heads, width, dim, device=device, dtype=dtype).mul_(0.5).requires_grad_() for _ in range(3)
    )
    keep = torch.ones(batch, width, dtype=torch.bool, device=device)
    keep[1, :PADDING] = False
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    allowed = causal[None, None] & keep[:, None, None, :]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    try:
        with sdpa_kernel([backend]) if backend is not None else nullcontext():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            out.backward(torch.randn_like(out))
    except RuntimeError as error:  # the backend refused these inputs
        return {"error": str(error).splitlines()[0][:200]}
    return {
        "out_nonfinite": int((~torch.isfinite(out)).sum()),
        **{f"grad_{n}_nonfinite": int((~torch.isfinite(t.grad)).sum()) for n, t in (("q", q), ("k", k), ("v", v))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("sdpa-nan-check.json"))
    args = parser.parse_args()
    import torch
    from torch.nn.attention import SDPBackend

    backends = {
        "default": None,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    result = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "cases": [],
    }
    for label in ("as installed", "cuDNN attention off (the worker hook)"):
        if label.startswith("cuDNN"):
            torch.backends.cuda.enable_cudnn_sdp(False)
        for dtype in (torch.bfloat16, torch.float32):
            for width in WIDTHS:
                for name, backend in backends.items():
                    if label.startswith("cuDNN") and name != "default":
                        continue
                    row = {"setting": label, "dtype": str(dtype), "width": width, "backend": name}
                    row.update(case(torch, width, backend, dtype))
                    result["cases"].append(row)
                    print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
