"""What the NVIDIA driver says about the GPUs, through NVML (`nvidia-ml-py`), never through nvidia-smi: the GPUs
present (for profiles and the doctor) and the samples `verl-p40 monitor` records. The only module that imports pynvml.
"""

from __future__ import annotations

import atexit
import time
from dataclasses import dataclass, fields
from pathlib import Path

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
    driver = _decode(pynvml.nvmlSystemGetDriverVersion())
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
                name=_decode(pynvml.nvmlDeviceGetName(handle)),
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


# ------------------------------------------------------------------------------------------------ monitor samples


@dataclass
class GPUSample:
    ts: float
    gpu: int
    name: str
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    throttle_reasons: str | None = None
    pcie_tx_kbs: float | None = None
    pcie_rx_kbs: float | None = None


@dataclass
class ProcessSample:
    ts: float
    gpu: int
    pid: int
    name: str
    used_memory_bytes: int | None


GPU_COLUMNS = [f.name for f in fields(GPUSample)]
PROCESS_COLUMNS = [f.name for f in fields(ProcessSample)]


_THROTTLE_NAMES = {
    "nvmlClocksThrottleReasonGpuIdle": "idle",
    "nvmlClocksThrottleReasonApplicationsClocksSetting": "app_clocks",
    "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
    "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksThrottleReasonSyncBoost": "sync_boost",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "power_brake",
    "nvmlClocksThrottleReasonDisplayClockSetting": "display_clock",
}


def decode_throttle(mask: int, pynvml) -> str:
    names = [label for attr, label in _THROTTLE_NAMES.items() if mask & getattr(pynvml, attr, 0)]
    return "|".join(names) if names else "none"


class NvmlSource:
    """Reads samples from the driver. A failing field becomes None (reported once); a failing GPU is reported and
    skipped for that sample; a GPU that disappears is reported and dropped."""

    def __init__(self, gpus: list[int] | None = None, log=print):
        self.nvml = nvml()  # raises NoGPU (exit code 3) without a driver
        self.log = log
        count = self.nvml.nvmlDeviceGetCount()
        wanted = gpus if gpus is not None else list(range(count))
        missing = [i for i in wanted if i >= count]
        if missing:
            raise NoGPU(f"GPU index {missing} not present; the driver reports {count}")
        self.handles = {i: self.nvml.nvmlDeviceGetHandleByIndex(i) for i in wanted}
        self.names = {i: _decode(self.nvml.nvmlDeviceGetName(h)) for i, h in self.handles.items()}
        self._warned: set[tuple[int, str]] = set()

    def _field(self, gpu: int, label: str, fn):
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            if (gpu, label) not in self._warned:
                self._warned.add((gpu, label))
                self.log(f"[monitor] GPU {gpu}: {label} unavailable ({exc}); recording it as empty")
            return None

    def _process_name(self, pid: int) -> str:
        try:
            return _decode(self.nvml.nvmlSystemGetProcessName(pid)).rsplit("/", 1)[-1]
        except self.nvml.NVMLError:
            try:
                return Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                return "?"

    def read(self) -> tuple[list[GPUSample], list[ProcessSample]]:
        n = self.nvml
        now = time.time()
        gpu_rows, proc_rows = [], []
        for index, handle in list(self.handles.items()):
            try:
                mem = n.nvmlDeviceGetMemoryInfo(handle)
            except n.NVMLError as exc:
                lost = isinstance(exc, getattr(n, "NVMLError_GpuIsLost", ())) or "lost" in str(exc).lower()
                if lost:
                    self.log(f"[monitor] GPU {index} ({self.names[index]}) disappeared ({exc}); no longer sampled")
                    del self.handles[index]
                else:
                    self.log(f"[monitor] GPU {index}: sample failed ({exc}); continuing")
                continue
            util = self._field(index, "utilization", lambda: n.nvmlDeviceGetUtilizationRates(handle))
            power = self._field(index, "power", lambda: n.nvmlDeviceGetPowerUsage(handle))
            limit = self._field(index, "power limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(handle))
            throttle = self._field(
                index, "throttle reasons", lambda: n.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            )
            gpu_rows.append(
                GPUSample(
                    ts=now,
                    gpu=index,
                    name=self.names[index],
                    memory_used_bytes=mem.used,
                    memory_total_bytes=mem.total,
                    utilization_gpu_pct=None if util is None else float(util.gpu),
                    utilization_memory_pct=None if util is None else float(util.memory),
                    temperature_c=self._field(
                        index, "temperature", lambda: float(n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU))
                    ),
                    power_w=None if power is None else power / 1000.0,
                    power_limit_w=None if limit is None else limit / 1000.0,
                    sm_clock_mhz=self._field(
                        index, "SM clock", lambda: float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM))
                    ),
                    memory_clock_mhz=self._field(
                        index, "memory clock", lambda: float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM))
                    ),
                    throttle_reasons=None if throttle is None else decode_throttle(throttle, n),
                    pcie_tx_kbs=self._field(
                        index,
                        "PCIe throughput",
                        lambda: float(n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_TX_BYTES)),
                    ),
                    pcie_rx_kbs=self._field(
                        index,
                        "PCIe throughput",
                        lambda: float(n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_RX_BYTES)),
                    ),
                )
            )
            procs = self._field(index, "processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(handle)) or []
            for proc in procs:
                proc_rows.append(
                    ProcessSample(
                        now,
                        index,
                        int(proc.pid),
                        self._process_name(int(proc.pid)),
                        getattr(proc, "usedGpuMemory", None),
                    )
                )
        if not self.handles:
            self.log("[monitor] no GPU left to sample")
        return gpu_rows, proc_rows

    def close(self) -> None:
        """Stop sampling. NVML itself stays initialised until the process exits (`nvml`)."""
        self.handles = {}
