#!/usr/bin/env bash
# Issue 69: the detached run on the device machine, from /tmp/code (main at HEAD, carried as .gpu-code69/code.tgz):
# 40 steps of grpo-gsm8k with one override (the variant), validated every 10 steps, then the whole test split at
# step 40 against the base's answers (learning_run.py horizon --score-steps 40).
# The base's answers are those of horizon-2026-12-03 (the same stand-in, the same eval command; the base's 1,319
# answers were identical in every eval of it so far), put in eval-base/ beforehand, so horizon scores step 40 alone.
# Usage (inside setsid): bash run69/launch.sh OVERRIDE
set -uo pipefail
echo $$ > /tmp/learn-launcher.pid
cd /tmp/code
date -u +"launch %FT%TZ"
for i in $(seq 120); do [ -f /tmp/setup-done ] && break; sleep 2; done
[ -f /tmp/setup-done ] || { echo "setup did not finish"; cat /tmp/setup.log; exit 3; }
export BENCH_NO_RANDOM=1
source bench/device/gpu_setup.sh || exit 4
set +e
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
date -u +"prepare %FT%TZ"
python3 bench/learning_run.py prepare --tokenizer tests/fixtures/qwen2.5-0.5b-instruct --gsm8k tests/fixtures/gsm8k || exit 5
cp -r run69/eval-base /tmp/learn/eval-base
date -u +"session %FT%TZ"
python3 bench/learning_run.py session --mode fast --no-eval --steps 40 --save-freq 40 --test-freq 10 \
  --budget-s 1200 --override "$1" --override trainer.max_actor_ckpt_to_keep=4 > /tmp/learn/session.log 2>&1
echo "session rc=$?"
date -u +"horizon %FT%TZ"
python3 bench/learning_run.py horizon --score-steps 40 > /tmp/learn/horizon.log 2>&1
echo "horizon rc=$?"
date -u +"end %FT%TZ"
touch /tmp/learn-done
