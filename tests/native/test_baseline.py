"""tests/native/baseline.py: which llama.cpp builds are on the suite's fixed CPU baseline, read as strings, and the
pins that make tests/run.sh build one."""

from __future__ import annotations

import re
from pathlib import Path

from native import baseline

# llama_print_system_info() of llama-cpp-python 0.3.36, built with llama.cpp's default native flags on a Xeon that
# reports AVX-512 and AMX (issue 66: this build died with SIGILL in the q8_0 decode), and built with the pinned flags
NATIVE = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
    "AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
PORTABLE = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | "
    "REPACK = 1 | "
)
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"


def test_the_measured_native_line_fails_and_the_portable_one_passes():
    assert baseline.problems(NATIVE) == [
        "AMX_INT8 = 1 (not in the baseline)",
        "AVX512 = 1 (not in the baseline)",
        "AVX512_BF16 = 1 (not in the baseline)",
        "AVX512_VBMI = 1 (not in the baseline)",
        "AVX512_VNNI = 1 (not in the baseline)",
    ]
    assert baseline.problems(PORTABLE) == []
    # the line alone (its five flags, no AVX2 printed) fails on both counts
    alone = "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1"
    assert baseline.problems(alone)[0] == "AVX2 = 0 (the baseline needs it)" and len(baseline.problems(alone)) == 6
    assert baseline.problems(PORTABLE.replace("AVX2 = 1", "AVX2 = 0")) == ["AVX2 = 0 (the baseline needs it)"]
    assert baseline.problems(PORTABLE + "AVX_VNNI = 1 | AMX_TILE = 1 | AVX512 = 0 |") == [
        "AMX_TILE = 1 (not in the baseline)",
        "AVX_VNNI = 1 (not in the baseline)",
    ]


def test_the_pinned_build_flags_turn_off_everything_the_check_refuses():
    """requirements/llamacpp.txt: the version the check wants, GGML_NATIVE off, AVX2 on, every AVX-512/AVX-VNNI/AMX
    option off; and requirements/test.txt no longer lists the binding, so no install builds it with the defaults."""
    text = (REQUIREMENTS / "llamacpp.txt").read_text()
    assert baseline.pinned_version() == "0.3.36"
    flags = dict(re.findall(r"-D(GGML_\w+)=(ON|OFF)", text))
    assert flags["GGML_NATIVE"] == "OFF" and flags["GGML_AVX2"] == "ON"
    off = {"GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16", "GGML_AVX_VNNI"}
    off |= {"GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"}
    assert {name for name, value in flags.items() if value == "OFF"} >= off
    for name in off:  # each one a name the system-info check refuses
        assert baseline.FORBIDDEN.match(name.removeprefix("GGML_"))
    tests_list = (REQUIREMENTS / "test.txt").read_text()
    assert not re.search(r"^llama-cpp-python", tests_list, re.M)


def test_a_cpu_without_avx2_is_named(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx\n\nprocessor\t: 1\nflags\t\t: fpu sse sse2 avx\n")
    assert (
        baseline.cpu_lacks_avx2(cpuinfo) == "this CPU has no AVX2 (/proc/cpuinfo), the baseline llama.cpp is built for"
    )
    cpuinfo.write_text("flags\t\t: fpu avx avx2 fma f16c avx512f amx_tile\n")
    assert baseline.cpu_lacks_avx2(cpuinfo, machine="x86_64") is None
    assert baseline.cpu_lacks_avx2(tmp_path / "absent", machine="x86_64") is None  # not Linux: not known, they run
    assert baseline.cpu_lacks_avx2(cpuinfo, machine="aarch64") == "this CPU is aarch64, not x86-64 with AVX2"


def test_a_binding_that_does_not_import_is_said_in_one_line(tmp_path):
    """The check imports the binding in a child process: one that is missing (or dies) is a line, not a crash."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named llama_cpp' >&2\nexit 1\n")
    python.chmod(0o755)
    assert (
        baseline.installed(str(python)) == "llama_cpp does not import: ModuleNotFoundError: No module named llama_cpp"
    )
    python.write_text("#!/bin/sh\nkill -ILL $$\n")
    assert baseline.installed(str(python)) == "llama_cpp does not import: the process died with SIGILL"
