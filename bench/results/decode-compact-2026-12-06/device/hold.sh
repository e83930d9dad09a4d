#!/usr/bin/env bash
# Session 17's hold, detached (setsid) by the launch call, cut to the ~20 minutes of device time left after a refused
# first batch: issue 67's decoder check on the real-weights stand-in (masked, 24 GB cap; generate(), the decoder, the
# decoder with p40_decode_compact), then update_phases.py phases (masked) if the deadline leaves room.
cd /tmp/code
echo $$ > /tmp/hold.pid
date -u +"hold start %FT%TZ"
for i in $(seq 150); do [ -f /tmp/setup-done ] && break; sleep 2; done
[ -f /tmp/setup-done ] || { echo "setup did not finish"; cat /tmp/setup.log; touch /tmp/hold-done; exit 3; }
export BENCH_NO_RANDOM=1; source bench/device/gpu_setup.sh > /tmp/hold-setup.log 2>&1; set +e
date -u +"prepare %FT%TZ"
python3 bench/learning_run.py prepare --tokenizer tests/fixtures/qwen2.5-0.5b-instruct --gsm8k tests/fixtures/gsm8k \
  > /tmp/prep.log 2>&1 || { echo "prepare failed"; tail -5 /tmp/prep.log; touch /tmp/hold-done; exit 5; }
date -u +"decode check %FT%TZ"
env PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 PASCAL_MASK_CC=6.1 VERL_P40_GPU_MEMORY_CAP_GB=24 \
  python3 bench/experiments/decode_check.py --model /tmp/learn/qwen-real --data /tmp/learn/gsm8k/test.parquet \
  --questions 256 --modes off,graph,compact --out /tmp/decode > /tmp/decode.log 2>&1
echo "decode rc=$?"; date -u +"decode end %FT%TZ"; touch /tmp/decode-done
if [ $(( $(cat /tmp/deadline) - $(date +%s) )) -gt 240 ]; then
  env PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 PASCAL_MASK_CC=6.1 python3 bench/experiments/update_phases.py \
    phases --config tests/fixtures/qwen2.5-0.5b-instruct --out /tmp/update-phases > /tmp/phases.log 2>&1
  echo "phases rc=$?"
fi
date -u +"hold end %FT%TZ"; touch /tmp/hold-done
