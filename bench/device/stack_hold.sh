#!/usr/bin/env bash
# Issue 45's hold on the lent GPU machine, detached (`setsid bash bench/device/stack_hold.sh &` from a copy of the
# checkout at /tmp/repo, once the bundle and model chunks are in /tmp/chunks): the machine's stack first, then the image's
# torch once `stage_torch.py unpack` (started by the call that carries the last torch chunk) has ended, then both side by
# side. Everything lands in /tmp/stackrun (hold.log, out/); /tmp/stackrun/done when it ends, however it ends.
set -uo pipefail
S=/tmp/stackrun
mkdir -p "$S/out"
trap 'touch "$S/done"' EXIT
exec > "$S/hold.log" 2>&1
cd /tmp/repo
python3 bench/device/chunks.py join --chunks /tmp/chunks/bundle --out /tmp/bundle && bash /tmp/bundle/install.sh || exit 1
export VERL_P40_NO_RANDOM=1
source bench/device/gpu_setup.sh || exit 1
set +e
python3 bench/device/chunks.py join --chunks /tmp/chunks/model --out /tmp/model.gguf || exit 1
python3 bench/device/gguf_to_hf.py --gguf /tmp/model.gguf --tokenizer "$GPU_DATA/qwen2.5-0.5b-instruct" --out /tmp/qwen-real || exit 1
STACKS=${STACKS:-machine image}
if [[ " $STACKS " == *" machine "* ]]; then
  date -u +"machine stack from %T"
  python3 bench/experiments/stack_check.py run --stack machine --out "$S/out" --timeout-s "${CHECK_TIMEOUT_S:-300}"
fi
for _ in $(seq 360); do [ -f "$S/unpack-ended" ] && break; sleep 5; done
[ -f "$S/unpacked" ] || { echo "the image's torch was not unpacked (see unpack.log)"; exit 1; }
date -u +"image stack from %T"
PYTHONPATH=/tmp/torch26:$PYTHONPATH python3 bench/experiments/stack_check.py run --stack image --out "$S/out" \
  --timeout-s "${CHECK_TIMEOUT_S:-300}" --checks "${IMAGE_CHECKS:-doctor,ppo,recipe,eval}"
[[ " $STACKS " == *" machine "* ]] && python3 bench/experiments/stack_check.py compare --out "$S/out"
date -u +"ended %T"
