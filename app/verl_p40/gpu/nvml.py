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


def parse_gpus(spec: str, origin: str = "--gpus") -> tuple[int, ...] | None:
    """`--gpus` of every command, typed once where the options are resolved (the options' `convert`): None for all,
    else the NVML indices `spec` names ("0,1"); raises on anything else, naming `origin` (the flag, or the environment
    variable the value came from)."""
    text = spec.strip().lower()  # `--gpus ""` names no GPU: said, not taken as all
    if text == "all":
        return None
    try:
        indices = tuple(int(part) for part in text.split(",") if part.strip())
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


@dataclass(frozen=True)
class Machine:
    """What NVML says about this machine, read once (`read`): the GPUs and the driver, or why no GPU is visible. As in
    gpustat, a field the driver does not report is None rather than an error."""

    gpus: tuple[GPUInfo, ...] | None  # None: no driver, or no GPU (`no_gpu` says which)
    driver: str | None = None
    driver_cuda: tuple[int, int] | None = None  # the newest CUDA the driver supports
    no_gpu: str | None = None  # NoGPU's line where `gpus` is None


def read() -> Machine:
    """This machine's GPUs and driver, through the one NVML initialisation of the process."""
    try:
        gpus = tuple(detect())
    except NoGPU as exc:
        return Machine(None, no_gpu=str(exc))
    try:
        driver, cuda = driver_versions()
    except _nvml_errors():  # not supported by this driver: said as unknown, never a traceback
        driver, cuda = None, None
    return Machine(gpus, driver, cuda)


def _nvml_errors() -> tuple[type[BaseException], ...]:
    """NVML's own error (a field the driver does not support), as an `except` clause takes it."""
    import pynvml

    return (pynvml.NVMLError,)
