#!/usr/bin/env bash
# Set up a CPU test environment in .venv (idempotent) and run the test suite. Needs Python 3.11 or 3.12, a C compiler,
# CMake and PyPI access;
# the data the tests read is committed in tests/fixtures (nothing beside the clone). Usage: bash tests/run.sh [pytest args]
# (-n 2 --dist loadgroup: the suite on 2 cores, as CI runs it; the tests that start Ray stay on one pytest-xdist worker)
# The suite passes with and without an NVIDIA driver (the tests about "no GPU" hide NVML themselves). VERL_P40_TEST_NVML=p40
# runs it under tests/nvml/p40's stand-in NVML, a P40 host's (CI does, on a machine without a driver).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# the pins (requirements/test.txt, the image's) have wheels for Python 3.11 and 3.12 only: numpy 1.26.4 none for 3.13
# (verl 0.5.0 asks for numpy < 2), Markdown 3.11.3 needs 3.11
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12)))' 2>/dev/null || {
  echo "tests/run.sh: $("$PY" -c 'import sys; print("Python %d.%d" % sys.version_info[:2])' 2>/dev/null || echo "'$PY' (not found)") is not 3.11 or 3.12, the versions the pins have wheels for: choose one with PYTHON=python3.11 bash tests/run.sh" >&2
  exit 2
}
case "${VERL_P40_TEST_NVML:-}" in
  "" | p40) ;;
  *) echo "tests/run.sh: VERL_P40_TEST_NVML=${VERL_P40_TEST_NVML}: leave it empty (this host's NVML) or set p40 (tests/nvml/p40)" >&2; exit 2 ;;
esac
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch as a CPU build. requirements/test.txt pins the version; on PyPI that version's Linux x86_64 wheel is the CUDA
# build, which pulls 16 nvidia-* wheels (several GB). PyTorch's CPU index has the same version without them (~200 MB).
torch_pin=$(grep -E '^torch==' requirements/test.txt)
cpu_index=${TORCH_CPU_INDEX_URL:-https://download.pytorch.org/whl/cpu}
if python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '${torch_pin#torch==}')" 2>/dev/null; then
  :  # installed already (any build): nothing to download
elif python -m pip install -q --retries 1 --timeout 20 --index-url "$cpu_index" \
    --extra-index-url "${PIP_INDEX_URL:-https://pypi.org/simple}" "${torch_pin}+cpu"; then
  echo "tests/run.sh: ${torch_pin}+cpu, the CPU build (from $cpu_index, or a wheel pip's own configuration finds)"
else
  echo "tests/run.sh: PyTorch's CPU index ($cpu_index) is not reachable: ${torch_pin} comes from your pip index. On PyPI" \
       "that is the CUDA build with its nvidia-* wheels (several GB), unless the index (or a local wheel pip finds)" \
       "has a CPU wheel of it. TORCH_CPU_INDEX_URL names another copy of the CPU index." >&2
fi
python -m pip install -q -r requirements/test.txt
# llama.cpp's binding, built from source for a fixed CPU baseline (requirements/llamacpp.txt says which, and why):
# rebuilt only when the one in .venv is another version or was built for other CPU features, and never taken from
# pip's wheel cache, which keys a wheel built from source by the source, not by the flags it was built with
if ! said=$(python tests/native/baseline.py); then
  echo "tests/run.sh: $said: building llama-cpp-python for the baseline (~4 min of CPU time)"
  # LLAMACPP_LEAN_CMAKE: the file that keeps llama.cpp's common library out of the build (requirements/llamacpp.txt)
  env -u CMAKE_ARGS -u FORCE_CMAKE LLAMACPP_LEAN_CMAKE="$PWD/requirements/llamacpp-lean.cmake" \
    python -m pip install -q --no-cache-dir --force-reinstall --no-deps -r requirements/llamacpp.txt
  said=$(python tests/native/baseline.py) || { echo "tests/run.sh: after the build, $said" >&2; exit 1; }
fi
echo "tests/run.sh: $said"
python -m pip install -q --no-deps verl==0.5.0
python -m pip install -q --no-deps -e .
if [ "${VERL_P40_TEST_NVML:-}" = p40 ]; then
  export PYTHONPATH="$PWD/tests/nvml/p40${PYTHONPATH:+:$PYTHONPATH}"
  echo "tests/run.sh: NVML is tests/nvml/p40's stand-in: one Tesla P40 (sm_61, 24 GiB), driver 535.183.01"
fi
exec python -m pytest "$@"
