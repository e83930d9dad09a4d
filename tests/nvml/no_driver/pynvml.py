"""A stand-in for nvidia-ml-py's `pynvml` on a machine without the NVIDIA driver: nvmlInit fails as the real one
does when libnvidia-ml.so.1 cannot be loaded. Tests about "no GPU" put it first on the path (tests/conftest.py,
`no_driver`), so they check the no-driver case on a GPU host too."""

from __future__ import annotations


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


def nvmlInit() -> None:
    raise NVMLError_LibraryNotFound()


def nvmlShutdown() -> None:
    raise NVMLError_LibraryNotFound()
