"""What the NVIDIA driver says about the GPUs, through NVML (`nvidia-ml-py`), never through nvidia-smi."""

from __future__ import annotations

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


def _decode(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml():
    """The initialised pynvml module, or NoGPU with the reason NVML gave."""
    try:
        import pynvml
    except ImportError:
        raise NoGPU("the nvidia-ml-py package is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NoGPU(f"NVML: {exc}") from None
    return pynvml


def driver_versions() -> tuple[str, tuple[int, int]]:
    """(driver version, the newest CUDA version it supports as (major, minor)); raises NoGPU without a driver."""
    pynvml = nvml()
    try:
        driver = _decode(pynvml.nvmlSystemGetDriverVersion())
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
    finally:
        pynvml.nvmlShutdown()
    return driver, (cuda // 1000, (cuda % 1000) // 10)


def detect() -> list[GPUInfo]:
    """All GPUs the driver reports; raises NoGPU when there is no driver or no GPU."""
    pynvml = nvml()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                GPUInfo(
                    index=index,
                    name=_decode(pynvml.nvmlDeviceGetName(handle)),
                    compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                    memory_total_gib=pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30,
                )
            )
    finally:
        pynvml.nvmlShutdown()
    if not gpus:
        raise NoGPU("the driver reports 0 devices")
    return gpus
