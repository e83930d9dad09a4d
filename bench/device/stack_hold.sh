#!/usr/bin/env bash
# Issue 45's hold on the lent GPU machine, detached, from a copy of the checkout at /tmp/repo (bench/results/
# stack-check-2026-12-04/README.md, "How it ran"):
#   setsid bash bench/device/stack_hold.sh &          once the bundle and model chunks are in /tmp/chunks: bundle,
#                                                      model, the machine's stack, then the image's once unpacked
#   setsid bash bench/device/stack_hold.sh unpack &   from the call that carries the last torch chunk
# STACKS="image" runs the image's stack alone (a second hold, the machine's results kept from the first), "machine"
# the machine's alone; `compare` runs where both stacks' JSON are. IMAGE_CHECKS orders the image's checks (eval first
# where device time is short), CHECK_TIMEOUT_S bounds each check. Everything lands in /tmp/stackrun (hold.log,
# unpack.log, out/); /tmp/stackrun/done (or unpack-ended) when it ends, however it ends.
set -uo pipefail
S=/tmp/stackrun
mkdir -p "$S/out"
cd /tmp/repo
if [ "${1:-}" = unpack ]; then
  trap 'touch "$S/unpack-ended"' EXIT
  python3 bench/device/stage_torch.py unpack --chunks /tmp/chunks/torch --target /tmp/torch26 --work /tmp \
    > "$S/unpack.log" 2>&1 && touch "$S/unpacked"
  exit
fi
trap 'touch "$S/done"' EXIT
exec > "$S/hold.log" 2>&1
STACKS=${STACKS:-machine image}
python3 bench/device/chunks.py join --chunks /tmp/chunks/bundle --out /tmp/bundle && bash /tmp/bundle/install.sh || exit 1
export BENCH_NO_RANDOM=1
source bench/device/gpu_setup.sh || exit 1
set +e
python3 bench/device/chunks.py join --chunks /tmp/chunks/model --out /tmp/model.gguf || exit 1
python3 bench/device/gguf_to_hf.py --gguf /tmp/model.gguf --tokenizer "$GPU_DATA/qwen2.5-0.5b-instruct" --out /tmp/qwen-real || exit 1
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
if [[ " $STACKS " == *" machine "* ]]; then
  date -u +"machine stack from %T"
  python3 bench/experiments/stack_check.py run --stack machine --out "$S/out" --timeout-s "${CHECK_TIMEOUT_S:-300}"
fi
if [[ " $STACKS " == *" image "* ]]; then
  for _ in $(seq 360); do [ -f "$S/unpack-ended" ] && break; sleep 5; done
  [ -f "$S/unpacked" ] || { echo "the image's torch was not unpacked (see unpack.log)"; exit 1; }
  date -u +"image stack from %T"
  PYTHONPATH=/tmp/torch26:$PYTHONPATH python3 bench/experiments/stack_check.py run --stack image --out "$S/out" \
    --timeout-s "${CHECK_TIMEOUT_S:-300}" --checks "${IMAGE_CHECKS:-doctor,ppo,recipe,eval}"
fi
[[ " $STACKS " == *" machine "* && " $STACKS " == *" image "* ]] && python3 bench/experiments/stack_check.py compare --out "$S/out"
date -u +"ended %T"
