"""The samples `verl-p40 monitor` records, read from the driver through NVML (`gpu/nvml.py` initialises it): memory,
utilisation, temperature, power, clocks, throttle reasons and PCIe throughput per GPU, and the processes on each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from pathlib import Path

from verl_p40.gpu.nvml import NoGPU, decode, nvml


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

    def __init__(self, gpus: tuple[int, ...] | None = None, log=print):
        self.nvml = nvml()  # raises NoGPU (exit code 3) without a driver
        self.log = log
        count = self.nvml.nvmlDeviceGetCount()
        wanted = gpus if gpus is not None else list(range(count))
        missing = [i for i in wanted if i >= count]
        if missing:
            raise NoGPU(f"GPU index {missing} not present; the driver reports {count}")
        self.handles = {i: self.nvml.nvmlDeviceGetHandleByIndex(i) for i in wanted}
        self.names = {i: decode(self.nvml.nvmlDeviceGetName(h)) for i, h in self.handles.items()}
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
            return decode(self.nvml.nvmlSystemGetProcessName(pid)).rsplit("/", 1)[-1]
        except self.nvml.NVMLError:
            try:
                return Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                return "?"

    def read(self) -> tuple[list[GPUSample], list[ProcessSample]]:
        now = time.time()
        gpu_rows, proc_rows = [], []
        for index, handle in list(self.handles.items()):
            try:
                mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            except self.nvml.NVMLError as exc:
                self._sample_failed(index, exc)
                continue
            gpu_rows.append(self._gpu_sample(now, index, handle, mem))
            proc_rows.extend(self._process_samples(now, index, handle))
        if not self.handles:
            self.log("[monitor] no GPU left to sample")
        return gpu_rows, proc_rows

    def _sample_failed(self, index: int, exc: Exception) -> None:
        """A GPU that is lost is said and no longer sampled; any other failure is said, and the next sample tries."""
        n = self.nvml
        lost = isinstance(exc, getattr(n, "NVMLError_GpuIsLost", ())) or "lost" in str(exc).lower()
        if lost:
            self.log(f"[monitor] GPU {index} ({self.names[index]}) disappeared ({exc}); no longer sampled")
            del self.handles[index]
        else:
            self.log(f"[monitor] GPU {index}: sample failed ({exc}); continuing")

    def _gpu_sample(self, now: float, index: int, handle, mem) -> GPUSample:
        n = self.nvml

        def field(label: str, fn):
            return self._field(index, label, fn)

        def number(label: str, fn):
            return field(label, lambda: float(fn()))

        util = field("utilization", lambda: n.nvmlDeviceGetUtilizationRates(handle))
        power = field("power", lambda: n.nvmlDeviceGetPowerUsage(handle))
        limit = field("power limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(handle))
        throttle = field("throttle reasons", lambda: n.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
        return GPUSample(
            ts=now,
            gpu=index,
            name=self.names[index],
            memory_used_bytes=mem.used,
            memory_total_bytes=mem.total,
            utilization_gpu_pct=None if util is None else float(util.gpu),
            utilization_memory_pct=None if util is None else float(util.memory),
            temperature_c=number("temperature", lambda: n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            sm_clock_mhz=number("SM clock", lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
            memory_clock_mhz=number("memory clock", lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM)),
            throttle_reasons=None if throttle is None else decode_throttle(throttle, n),
            pcie_tx_kbs=number(
                "PCIe throughput", lambda: n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_TX_BYTES)
            ),
            pcie_rx_kbs=number(
                "PCIe throughput", lambda: n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_RX_BYTES)
            ),
        )

    def _process_samples(self, now: float, index: int, handle) -> list[ProcessSample]:
        procs = self._field(index, "processes", lambda: self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        return [
            ProcessSample(now, index, int(p.pid), self._process_name(int(p.pid)), getattr(p, "usedGpuMemory", None))
            for p in procs
        ]

    def close(self) -> None:
        """Stop sampling. NVML itself stays initialised until the process exits (`nvml`)."""
        self.handles = {}
