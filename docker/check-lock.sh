#!/usr/bin/env bash
# Each image lock installed the way the Dockerfile installs it, in a clean venv: torch 2.6.0
# (PyPI's build, +cu124 with its CUDA wheels), the full lock with --no-deps, verl 0.5.0, the app; then `pip check` (the
# lock is complete and consistent), the lock agrees with its requirements*.in, and the patch set applies.
#   bash docker/check-lock.sh [requirements.txt requirements-vllm.txt ...]   (default: both locks)
set -euo pipefail
cd "$(dirname "$0")/.."
locks=("$@")
[ ${#locks[@]} -gt 0 ] || locks=(requirements.txt requirements-vllm.txt)
for lock in "${locks[@]}"; do
  echo "== docker/$lock"
  venv=$(mktemp -d)/venv
  python3 -m venv "$venv"
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  python -m pip install -q "pip==25.1.1" "setuptools==80.9.0" "wheel==0.45.1"  # as the Dockerfile
  python -m pip install -q "torch==2.6.0"  # with its CUDA wheels: torch will not import without them
  python -m pip install -q --no-deps -r "docker/$lock"
  python -m pip install -q --no-deps verl==0.5.0
  # from a copy: pip writes build files beside the sources, and CI runs this beside tests/run.sh's editable install
  src=$(mktemp -d) && cp -r pyproject.toml README.md app config "$src/"
  python -m pip install -q --no-deps "$src"
  rm -rf "$src"
  # Left out on purpose: wandb (only verl's wandb logger imports it) and torch's CUDA wheels (the default image takes
  # torch 2.6.0+cu118 with its own from the PyTorch index; the -vllm variant PyPI's with its CUDA 12.4 wheels).
  problems=$(python -m pip check 2>&1 | grep -v -E "requires wandb, which is not installed|^torch 2\.6\.0 requires (nvidia-|triton)|^No broken requirements" || true)
  [ -z "$problems" ] || { echo "pip check: $problems" >&2; exit 1; }
  # Every top-level pin of the lock's .in file (following -r includes) is in the lock at the same version.
  python - "docker/${lock%.txt}.in" "docker/$lock" <<'PY'
import re, sys
from pathlib import Path

def pins(path, follow=True):
    out = {}
    for line in Path(path).read_text().splitlines():
        if follow and line.startswith("-r "):
            out |= pins(Path(path).parent / line.split(maxsplit=1)[1])
        m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out

wanted, locked = pins(sys.argv[1]), pins(sys.argv[2], follow=False)
bad = {k: (v, locked.get(k)) for k, v in wanted.items() if locked.get(k) != v}
if bad:
    sys.exit(f"{sys.argv[2]} disagrees with {sys.argv[1]} (run docker/lock.sh): {bad}")
print(f"lock: {len(locked)} pins, the {len(wanted)} of {sys.argv[1]} among them")
PY
  verl-p40 patch-verl
  verl-p40 patch-verl --check
  python -c "import verl_p40.cli, verl.workers.fsdp_workers; print('patched verl imports:', verl.workers.fsdp_workers.__file__)"
  tensorboard --version_tb  # the tensorboard service's program starts (it needs setuptools' pkg_resources)
  deactivate
  rm -rf "$(dirname "$venv")"
done
echo "lock check: OK"
