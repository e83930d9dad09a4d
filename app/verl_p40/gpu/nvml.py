"""What the NVIDIA driver says about the GPUs, through NVML (`nvidia-ml-py`), never through nvidia-smi: the GPUs
present (for profiles and the doctor). The only module that imports pynvml; the samples `verl-p40 monitor` records
are read through it by `gpu/sampler.py`.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass

from verl_p40 import UserError

NO_GPU_EXIT = 3


class NoGPU(UserError):
    def __init__(self, reason: str):
        super().__init__(f"no NVIDIA GPU visible through NVML ({reason})", exit_code=NO_GPU_EXIT)


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_total_gib: float

    @property
    def sm(self) -> float:
        major, minor = self.compute_capability
        return major + minor / 10

    def describe(self) -> str:
        major, minor = self.compute_capability
        return f"GPU {self.index}: {self.name}, sm_{major}{minor}, {self.memory_total_gib:.1f} GiB"


def decode(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_initialized = False


def nvml():
    """The pynvml module, initialised once per process and shut down when it exits (gpustat's ensure_initialized), or
    NoGPU with the reason NVML gave."""
    global _initialized
    try:
        import pynvml
    except ImportError:
        raise NoGPU("the nvidia-ml-py package is not installed") from None
    if not _initialized:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NoGPU(f"NVML: {exc}") from None
        _initialized = True
        atexit.register(_shutdown, pynvml)
    return pynvml


def _shutdown(pynvml) -> None:
    global _initialized
    if _initialized:
        _initialized = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def parse_gpus(spec: str | None, origin: str = "--gpus") -> list[int] | None:
    """`--gpus` of every command: None for all, else the NVML indices `spec` names ("0,1"); raises on anything else,
    naming `origin` (the flag, or the environment variable the value came from)."""
    text = ("all" if spec is None else spec).strip().lower()  # `--gpus ""` names no GPU: said, not taken as all
    if text == "all":
        return None
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"{origin} {spec!r}: use all, or GPU indices as nvidia-smi numbers them (e.g. 0,1)") from None
    if not indices:
        raise UserError(f"{origin} {spec!r} names no GPU: use all, or GPU indices as nvidia-smi shows them (e.g. 0,1)")
    if len(set(indices)) != len(indices) or min(indices) < 0:
        raise UserError(f"{origin} {spec!r}: use all, or distinct GPU indices as nvidia-smi numbers them (e.g. 0,1)")
    return indices


def driver_versions() -> tuple[str, tuple[int, int]]:
    """(driver version, the newest CUDA version it supports as (major, minor)); raises NoGPU without a driver."""
    pynvml = nvml()
    driver = decode(pynvml.nvmlSystemGetDriverVersion())
    cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
    return driver, (cuda // 1000, (cuda % 1000) // 10)


def detect() -> list[GPUInfo]:
    """All GPUs the driver reports; raises NoGPU when there is no driver or no GPU."""
    pynvml = nvml()
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(
            GPUInfo(
                index=index,
                name=decode(pynvml.nvmlDeviceGetName(handle)),
                compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                memory_total_gib=pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30,
            )
        )
    if not gpus:
        raise NoGPU("the driver reports 0 devices")
    return gpus


def detect_gpus() -> list[GPUInfo] | None:
    """Every GPU NVML reports, or None where there is no driver (a config made on another machine)."""
    try:
        return detect()
    except UserError:
        return None
