#!/usr/bin/env bash
# The code a hold runs, from this checkout's HEAD, as one file to carry: .gpu-code/code.tgz (ignored), unpacked on the
# device machine into /tmp/code by the second staging call. Run from the repository root: bash bench/device/holds/code.sh
set -euo pipefail
mkdir -p .gpu-code
git archive --format=tar.gz -o .gpu-code/code.tgz HEAD app bench/learning_run.py bench/lib bench/device bench/experiments \
  bench/project.py bench/projection_band.py config pyproject.toml tests/fixtures \
  bench/results/horizon-2026-12-03/learning-work.tgz
du -h .gpu-code/code.tgz; git log --oneline -1
