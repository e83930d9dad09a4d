# Installed into verl by verl-p40's patch set as verl/utils/p40_phase_peaks.py.
"""The GPU memory each phase of a step peaked at, beside the process's peak that verl 0.5.0 logs.

verl logs `perf/max_memory_allocated_gb` once a step, from the actor's update: torch's peak since the process
started, which says how close the run came to the card but not which phase came closest. verl-p40's memory plan
predicts a peak per phase (verl_p40/plan/memory.py: generation, old_log_prob, ref, values, update_critic,
update_actor); `measured(phase)` records each phase's own peak (torch's peak statistics reset as the phase starts,
read as it ends; the trainer's validation, which generates on its own batch, as `validation`), and `take(current)`
hands them to the actor's update metrics as `perf/peak_allocated_gb/<phase>`, with `perf/max_memory_allocated_gb`
and `perf/max_memory_reserved_gb` kept as verl means them (the process's peak since it started: every reset folds
the peak so far in first). Without CUDA nothing is measured or reset.
"""

import functools

import torch

_PEAKS: dict[str, int] = {}  # phase -> allocated bytes at its peak since the last take()
_SINCE_START = [0, 0]  # the process's peaks (allocated, reserved) before the last reset
_DEPTH = [0]  # a phase called inside another (the reference pass through compute_log_prob) is the outer one's


def _peaks() -> tuple[int, int]:
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def _begin() -> None:
    allocated, reserved = _peaks()
    _SINCE_START[0], _SINCE_START[1] = max(_SINCE_START[0], allocated), max(_SINCE_START[1], reserved)
    torch.cuda.reset_peak_memory_stats()


def _end(phase: str) -> None:
    _PEAKS[phase] = max(_PEAKS.get(phase, 0), _peaks()[0])


def measured(phase: str):
    """A worker method's decorator: the GPU memory peak of each call is recorded as `phase`'s, or as `validation`'s
    when the trainer's validation calls it (its batch says so: meta_info["validate"])."""

    def decorate(method):
        @functools.wraps(method)
        def run(*args, **kwargs):
            if not torch.cuda.is_available() or _DEPTH[0]:
                return method(*args, **kwargs)
            data = args[1] if len(args) > 1 else None  # (self, the DataProto)
            validating = bool(getattr(data, "meta_info", None) and data.meta_info.get("validate"))
            _begin()
            _DEPTH[0] += 1
            try:
                return method(*args, **kwargs)
            finally:
                _DEPTH[0] -= 1
                _end("validation" if validating else phase)

        return run

    return decorate


def take(current: str) -> dict[str, float]:
    """The metrics: each recorded phase's peak in GB (GiB, as verl's) since the last call, `current` (the phase
    running now) up to this moment, and the process's peaks since it started; the record is then cleared."""
    gib = 1024**3
    if not torch.cuda.is_available():  # verl's own lines, as they were
        from verl.utils.device import get_torch_device

        return {
            "perf/max_memory_allocated_gb": get_torch_device().max_memory_allocated() / gib,
            "perf/max_memory_reserved_gb": get_torch_device().max_memory_reserved() / gib,
        }
    allocated, reserved = _peaks()  # since the last reset: every earlier peak is folded into _SINCE_START
    phases = {**_PEAKS, current: allocated}
    _PEAKS.clear()
    out = {f"perf/peak_allocated_gb/{phase}": peak / gib for phase, peak in phases.items()}
    out["perf/max_memory_allocated_gb"] = max(_SINCE_START[0], *phases.values()) / gib
    out["perf/max_memory_reserved_gb"] = max(_SINCE_START[1], reserved) / gib
    return out
