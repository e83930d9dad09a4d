"""A stand-in for nvidia-ml-py's `pynvml` that reports one Tesla P40 (sm_61, 24 GiB) behind driver 535.183.01
(CUDA 12.2), as a P40 host's NVML does: the tests run with it on the PYTHONPATH to check the suite on a GPU host
(`VERL_P40_TEST_NVML=p40 bash tests/run.sh`; CI does). Only what verl-p40 reads (app/verl_p40/gpu/) is here; any
other name is an AttributeError, so a new NVML call in the product shows up as a failing test, not a silent zero.

A test may describe another host through the environment (the `verl-p40` it starts reads it too):
VERL_P40_TEST_NVML_DRIVER="590.44.01" for the driver, VERL_P40_TEST_NVML_GPUS="Tesla P40:6.1:24,..." for the cards
(name, compute capability, GiB each, in NVML's index order)."""

from __future__ import annotations

import os
from types import SimpleNamespace

NAME = b"Tesla P40"
COMPUTE_CAPABILITY = (6, 1)
MEMORY_TOTAL = 24 * 2**30  # a P40's 24 GiB (NVML reports 24,438,423,552 bytes usable on one; the card's size here)
DRIVER = os.environ.get("VERL_P40_TEST_NVML_DRIVER") or "535.183.01"


def _cards() -> list[tuple[bytes, tuple[int, int], int]]:
    spec = os.environ.get("VERL_P40_TEST_NVML_GPUS")
    if not spec:
        return [(NAME, COMPUTE_CAPABILITY, MEMORY_TOTAL)]
    cards = []
    for card in spec.split(","):
        name, cc, gib = card.split(":")
        major, minor = cc.split(".")
        cards.append((name.encode(), (int(major), int(minor)), int(float(gib) * 2**30)))
    return cards


CARDS = _cards()
CUDA_DRIVER = 12020

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonApplicationsClocksSetting = 0x2
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80


class NVMLError(Exception):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_InvalidArgument(NVMLError):
    def __str__(self) -> str:
        return "Invalid Argument"


_initialized = 0


def nvmlInit() -> None:
    global _initialized
    _initialized += 1


def nvmlShutdown() -> None:
    global _initialized
    _initialized = max(0, _initialized - 1)


def _handle(handle):
    if not isinstance(handle, int) or not 0 <= handle < len(CARDS):
        raise NVMLError_InvalidArgument()
    return handle


def nvmlSystemGetDriverVersion() -> str:
    return DRIVER


def nvmlSystemGetCudaDriverVersion() -> int:
    return CUDA_DRIVER


def nvmlDeviceGetCount() -> int:
    return len(CARDS)


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return _handle(index)


def nvmlDeviceGetName(handle) -> bytes:
    return CARDS[_handle(handle)][0]


def nvmlDeviceGetCudaComputeCapability(handle) -> tuple[int, int]:
    return CARDS[_handle(handle)][1]


def nvmlDeviceGetMemoryInfo(handle):
    total, used = CARDS[_handle(handle)][2], 0
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetUtilizationRates(handle):
    _handle(handle)
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetTemperature(handle, sensor) -> int:
    _handle(handle)
    return 30


def nvmlDeviceGetPowerUsage(handle) -> int:
    _handle(handle)
    return 50_000  # milliwatts: idle


def nvmlDeviceGetEnforcedPowerLimit(handle) -> int:
    _handle(handle)
    return 250_000  # a P40's 250 W


def nvmlDeviceGetClockInfo(handle, kind) -> int:
    _handle(handle)
    return {NVML_CLOCK_SM: 544, NVML_CLOCK_MEM: 405}[kind]  # idle clocks


def nvmlDeviceGetCurrentClocksThrottleReasons(handle) -> int:
    _handle(handle)
    return nvmlClocksThrottleReasonGpuIdle


def nvmlDeviceGetPcieThroughput(handle, counter) -> int:
    _handle(handle)
    return 0


def nvmlDeviceGetComputeRunningProcesses(handle) -> list:
    _handle(handle)
    return []


def nvmlSystemGetProcessName(pid: int) -> bytes:
    raise NVMLError("Not Found")
