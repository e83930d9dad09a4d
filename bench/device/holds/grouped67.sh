#!/usr/bin/env bash
# Issue 67's next lever on the device: the decoder's prompt pass by length groups (p40_prefill_groups=8). Masked, in
# this order: decode_check.py on the real-weights stand-in (256 test questions, greedy: `grouped`'s answers against
# generate()'s and `compact`'s), then, where the deadline leaves room (~540 s), the random-weights timing pair
# `compact,grouped` (update_phases.py bench). Needs the model's chunks (staged as for adopt69.sh). Detached by the
# launch call (setsid), from the code copy in /tmp/code, once setup.sh has written /tmp/setup-done; /tmp/hold-done at
# its end. Results: /tmp/grouped67 (follow.sh /tmp/grouped67 570).
cd /tmp/code
source bench/device/holds/start.sh grouped67
W=/tmp/grouped67
mkdir -p $W
date -u +"prepare %FT%TZ"
python3 bench/learning_run.py prepare --work $W --out $W/out --tokenizer tests/fixtures/qwen2.5-0.5b-instruct \
  --gsm8k tests/fixtures/gsm8k > /tmp/prep.log 2>&1 || { echo "prepare failed"; touch /tmp/hold-done; exit 5; }
date -u +"decode check %FT%TZ"
env PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 PASCAL_MASK_CC=6.1 VERL_P40_GPU_MEMORY_CAP_GB=24 \
  python3 bench/experiments/decode_check.py --model $W/qwen-real --data $W/gsm8k/test.parquet --questions 256 \
  --modes off,compact,grouped --out $W/decode > $W/decode.log 2>&1
echo "decode check rc=$?"
if [ $(( $(cat /tmp/deadline) - $(date +%s) )) -gt 540 ]; then
  date -u +"timing pair %FT%TZ"
  source bench/device/holds/timing_pair.sh
  timing_pair compact,grouped $W/timing-pair $W/timing-pair.log
  echo "timing pair rc=$?"
fi
date -u +"hold end %FT%TZ"; touch /tmp/hold-done
