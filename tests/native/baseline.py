"""Whether llama.cpp's binding in this environment is built for the test suite's fixed CPU baseline.

The baseline (requirements/llamacpp.txt, with its reason): AVX2 on, nothing of AVX-512, AVX-VNNI or AMX. The build
says what it was compiled with in `llama_print_system_info()` ("CPU : SSE3 = 1 | ... | AVX2 = 1 | ..."); this module
reads that line, so tests/run.sh (whether to rebuild) and the suite (whether the binding in use is the portable one)
ask the same question in one place.

    python tests/native/baseline.py   exit 0: the installed binding is the pinned version on the baseline (or this
                                      CPU has no AVX2: the llama.cpp tests skip, and only the version is checked);
                                      exit 1: one line saying what differs (not installed, other version, other flags)

The binding is imported in a child process: a binding built for another CPU may die on import or on its first call,
and that must not take the asking process with it.
"""

from __future__ import annotations

import platform
import re
import signal
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements" / "llamacpp.txt"
REQUIRED = ("AVX2",)
# the instruction sets a build for the baseline never uses: AVX-512 in all its flavours, AVX-VNNI, AMX
FORBIDDEN = re.compile(r"^(AVX512\w*|AVX_VNNI|AMX\w*)$")


def features(system_info: str) -> dict[str, bool]:
    """`llama_print_system_info()`'s "NAME = 0|1" pairs (any backend's), as a dict."""
    return {m[1]: m[2] == "1" for m in re.finditer(r"([A-Za-z0-9_]+) = ([01])\b", system_info)}


def problems(system_info: str) -> list[str]:
    """What keeps a build with this system info off the baseline: a required set missing, a forbidden one on."""
    flags = features(system_info)
    missing = [name for name in REQUIRED if not flags.get(name)]
    extra = sorted(name for name, on in flags.items() if on and FORBIDDEN.match(name))
    return [f"{name} = 0 (the baseline needs it)" for name in missing] + [
        f"{name} = 1 (not in the baseline)" for name in extra
    ]


def pinned_version(requirements: Path = REQUIREMENTS) -> str:
    """The llama-cpp-python version requirements/llamacpp.txt pins."""
    for line in requirements.read_text().splitlines():
        m = re.match(r"llama-cpp-python==(\S+)", line.strip())
        if m:
            return m[1]
    raise ValueError(f"{requirements}: no 'llama-cpp-python==VERSION' line")


_PROBE = (
    "import llama_cpp, sys; info = llama_cpp.llama_print_system_info(); "
    "sys.stdout.write(llama_cpp.__version__ + '\\n' + (info.decode() if isinstance(info, bytes) else info))"
)


def installed(python: str = sys.executable) -> tuple[str, str] | str:
    """(version, system info) of the binding `python` imports, or why there is none (one line)."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "llama_cpp does not import: no answer in 120 s"
    if proc.returncode < 0:
        return f"llama_cpp does not import: the process died with {signal.Signals(-proc.returncode).name}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"llama_cpp does not import: {tail}"
    version, _, info = proc.stdout.partition("\n")
    return version.strip(), info.strip()


def cpu_lacks_avx2(cpuinfo: Path = Path("/proc/cpuinfo"), machine: str | None = None) -> str | None:
    """Why this CPU cannot run a baseline build (not x86-64, or no AVX2 in its flags), or None. An x86-64 machine
    without /proc/cpuinfo (not Linux): None (not known)."""
    machine = machine or platform.machine()
    if machine.lower() not in ("x86_64", "amd64"):
        return f"this CPU is {machine}, not x86-64 with AVX2"
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    if flags is None or "avx2" in flags:
        return None
    return "this CPU has no AVX2 (/proc/cpuinfo), the baseline llama.cpp is built for"


def _distribution_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None


def verdict(python: str = sys.executable) -> str | None:
    """None when the installed binding is the pinned version built for the baseline; else one line saying why not.
    On a CPU without AVX2 only the version is checked: loading the baseline build there may itself be the crash."""
    if cpu_lacks_avx2():
        version = _distribution_version()
        if version == pinned_version():
            return None
        return f"llama-cpp-python {version or '(none)'} is installed, requirements/llamacpp.txt pins {pinned_version()}"
    found = installed(python)
    if isinstance(found, str):
        return found
    version, info = found
    want = pinned_version()
    if version != want:
        return f"llama-cpp-python {version} is installed, requirements/llamacpp.txt pins {want}"
    wrong = problems(info)
    if wrong:
        return f"llama-cpp-python {version} is not built for the baseline: {', '.join(wrong)}"
    return None


def main() -> int:
    why = verdict()
    if why is None:
        lacks = cpu_lacks_avx2()
        said = f"{lacks}: the llama.cpp tests skip" if lacks else "built for the baseline (AVX2, no AVX-512/AMX)"
        print(f"llama-cpp-python {pinned_version()}: {said}")
        return 0
    print(why)
    return 1


if __name__ == "__main__":
    sys.exit(main())
