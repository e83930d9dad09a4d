#!/usr/bin/env bash
# Set up a CPU test environment in .venv (idempotent) and run the test suite. Needs Python >= 3.10 and PyPI access;
# the data the tests read is committed in tests/fixtures (nothing beside the clone). Usage: bash tests/run.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -r requirements/test.txt
python -m pip install -q --no-deps verl==0.5.0
python -m pip install -q --no-deps -e .
exec python -m pytest "$@"
