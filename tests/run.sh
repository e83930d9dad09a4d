#!/usr/bin/env bash
# Set up a CPU test environment in .venv (idempotent) and run the test suite. Needs Python >= 3.10 and PyPI access;
# the data the tests read is committed in tests/fixtures (nothing beside the clone). Usage: bash tests/run.sh [pytest args]
# The suite passes with and without an NVIDIA driver (the tests about "no GPU" hide NVML themselves). VERL_P40_TEST_NVML=p40
# runs it under tests/nvml/p40's stand-in NVML, a P40 host's (CI does, on a machine without a driver).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
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
python -m pip install -q --no-deps verl==0.5.0
python -m pip install -q --no-deps -e .
if [ "${VERL_P40_TEST_NVML:-}" = p40 ]; then
  export PYTHONPATH="$PWD/tests/nvml/p40${PYTHONPATH:+:$PYTHONPATH}"
  echo "tests/run.sh: NVML is tests/nvml/p40's stand-in: one Tesla P40 (sm_61, 24 GiB), driver 535.183.01"
fi
exec python -m pytest "$@"
