#!/usr/bin/env bash
# Remake an image lock from its top-level pins: resolve them together with torch 2.6.0 and verl 0.5.0's declared
# needs in a clean Python 3.11 venv, then freeze everything except torch's own CUDA wheels (the Dockerfile installs
# torch from TORCH_INDEX_URL) and verl.
#   bash docker/lock.sh          docker/requirements.in      -> docker/requirements.txt       (the default image)
#   bash docker/lock.sh vllm     docker/requirements-vllm.in -> docker/requirements-vllm.txt  (the -vllm variant)
set -euo pipefail
cd "$(dirname "$0")/.."
suffix=${1:+-$1}
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
. "$venv/bin/activate"
python -m pip install -q "pip==25.1.1"
python -m pip install -q -c <(echo "torch==2.6.0") -r "docker/requirements${suffix}.in" "torch==2.6.0"
python -m pip install -q --no-deps verl==0.5.0
out="docker/requirements${suffix}.txt"
{
  echo "# The image's full Python lock${suffix:+ (${suffix#-} variant)} (Python 3.11, Debian 12): every package and every"
  echo "# transitive dependency, pinned. The Dockerfile installs it with --no-deps after torch (which PIP_CONSTRAINT"
  echo "# holds at the image's build), so nothing is resolved at build time and nothing can replace torch. Not here:"
  echo "# torch and its CUDA wheels (the Dockerfile's TORCH_VERSION), Apex (built), verl (installed --no-deps, patched)."
  echo "# Made from docker/requirements${suffix}.in by docker/lock.sh${1:+ $1}; CI's docker/check-lock.sh checks it resolves."
  python -m pip freeze | grep -v -E "^(torch==|triton==|verl==|nvidia-[a-z-]+-cu1[12]==)"
} > "$out.new"
mv "$out.new" "$out"
rm -rf "$(dirname "$venv")"
echo "wrote $out ($(grep -c '==' "$out") pins)"
