"""The median time of a piece of GPU (or CPU) work, the device synchronised around each run."""

from __future__ import annotations

import statistics
import time


def timed(fn, device: str, reps: int) -> float:
    """Median seconds of `fn` over `reps` runs after one warm-up."""
    import torch

    fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
