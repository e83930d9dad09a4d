#!/usr/bin/env bash
# Remake docker/requirements.txt (the image's full lock) from docker/requirements.in: resolve the top-level pins
# together with torch 2.6.0 and verl 0.5.0's declared needs in a clean Python 3.11 venv, then freeze everything
# except torch and its CUDA wheels (the Dockerfile installs those from the PyTorch index) and verl.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
. "$venv/bin/activate"
python -m pip install -q "pip==25.1.1"
python -m pip install -q -c <(echo "torch==2.6.0") -r docker/requirements.in "torch==2.6.0"
python -m pip install -q --no-deps verl==0.5.0
{
  sed -n '1,/^# Made from/p' docker/requirements.txt
  python -m pip freeze | grep -v -E "^(torch==|triton==|verl==|nvidia-[a-z-]+-cu1[12]==)"
} > docker/requirements.txt.new
mv docker/requirements.txt.new docker/requirements.txt
rm -rf "$(dirname "$venv")"
echo "wrote docker/requirements.txt ($(grep -c '==' docker/requirements.txt) pins)"
