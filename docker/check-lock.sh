#!/usr/bin/env bash
# The image's Python layer without the CUDA wheels, in a clean venv: torch 2.6.0 (PyPI's build, without its CUDA
# wheels), the full lock with --no-deps as the Dockerfile installs it, verl 0.5.0, the app; then `pip check` (the
# lock is complete and consistent), the lock agrees with docker/requirements.in, the patch set applies.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
. "$venv/bin/activate"
python -m pip install -q "pip==25.1.1"
python -m pip install -q --no-deps "torch==2.6.0"
python -m pip install -q --no-deps -r docker/requirements.txt
python -m pip install -q --no-deps verl==0.5.0
python -m pip install -q --no-deps .
# Left out on purpose: wandb (only verl's wandb logger imports it) and torch's CUDA wheels (the image takes
# torch 2.6.0+cu118 with its own from the PyTorch index).
problems=$(python -m pip check 2>&1 | grep -v -E "requires wandb, which is not installed|^torch 2\.6\.0 requires (nvidia-|triton)|^No broken requirements" || true)
[ -z "$problems" ] || { echo "pip check: $problems" >&2; exit 1; }
# Every top-level pin of requirements.in is in the lock at the same version.
python - <<'PY'
import re, sys
pins = lambda path: {m.group(1).lower().replace("_", "-"): m.group(2) for m in
                     (re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line) for line in open(path)) if m}
wanted, locked = pins("docker/requirements.in"), pins("docker/requirements.txt")
bad = {k: (v, locked.get(k)) for k, v in wanted.items() if locked.get(k) != v}
if bad:
    sys.exit(f"docker/requirements.txt disagrees with requirements.in (run docker/lock.sh): {bad}")
print(f"lock: {len(locked)} pins, the {len(wanted)} of requirements.in among them")
PY
verl-p40 patch-verl
verl-p40 patch-verl --check
python -c "import verl_p40.cli, verl.workers.fsdp_workers; print('patched verl imports:', verl.workers.fsdp_workers.__file__)"
rm -rf "$(dirname "$venv")"
echo "lock check: OK"
