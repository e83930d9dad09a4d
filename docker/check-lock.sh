#!/usr/bin/env bash
# What the image's Python layer does, minus the CUDA wheels, in a clean venv: install docker/requirements.txt
# (the pins must resolve together), verl 0.5.0 from PyPI without deps, the app, apply the patch set and check it.
# torch is the CPU build here (the image installs torch==2.6.0+cu118 from the PyTorch index first).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
. "$venv/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -r docker/requirements.txt
python -m pip install -q --no-deps verl==0.5.0
python -m pip install -q --no-deps .
# verl declares wandb, which only its wandb logger imports; everything else must be consistent.
problems=$(python -m pip check 2>&1 | grep -v -e "requires wandb, which is not installed" -e "^No broken requirements" || true)
[ -z "$problems" ] || { echo "pip check: $problems" >&2; exit 1; }
verl-p40 patch-verl
verl-p40 patch-verl --check
python -c "import verl_p40.cli, verl.workers.fsdp_workers; print('patched verl imports:', verl.workers.fsdp_workers.__file__)"
rm -rf "$(dirname "$venv")"
echo "lock check: OK"
