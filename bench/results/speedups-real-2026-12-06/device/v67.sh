#!/usr/bin/env bash
# Issue 67, item 2 cut to what one session's leftover device time holds: the P40-path run (masked, 24 GB cap) with both
# speed-ups (p40_log_probs=auto, the plan's offered p40_update_tokens), validated at 0 and 10, stopped by its budget.
cd /tmp/code
echo $$ > /tmp/v.pid
for i in $(seq 120); do [ -f /tmp/setup-done ] && break; sleep 2; done
export BENCH_NO_RANDOM=1; source bench/device/gpu_setup.sh > /tmp/v-setup.log 2>&1; set +e
date -u +"prepare %FT%TZ"
python3 bench/learning_run.py prepare --tokenizer tests/fixtures/qwen2.5-0.5b-instruct --gsm8k tests/fixtures/gsm8k > /tmp/v-prep.log 2>&1 || exit 5
env PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 PASCAL_MASK_CC=6.1 python3 -m verl_p40.cli config --profile p40 \
  --model /tmp/learn/qwen-real --data /tmp/learn/gsm8k --gpu-memory-cap-gb 24 > /dev/null 2> /tmp/config-notes.txt
T=$(sed -n 's/^.*update: .*--set actor_rollout_ref\.actor\.p40_update_tokens=\([0-9][0-9]*\).*$/\1/p' /tmp/config-notes.txt | head -n1)
echo "$T" > /tmp/update-tokens.txt; [ -n "$T" ] || { echo "no update offered"; exit 3; }
left=$(( $(cat /tmp/deadline) - $(date +%s) - 30 ))
date -u +"session %FT%TZ budget ${left}s tokens $T"
python3 bench/learning_run.py session --mode p40 --no-eval --steps 20 --save-freq -1 --test-freq 10 --budget-s $left --stop-s 60 \
  --override actor_rollout_ref.rollout.p40_log_probs=auto --override actor_rollout_ref.actor.p40_update_tokens=$T > /tmp/learn/session.log 2>&1
echo "session rc=$?"; date -u +"end %FT%TZ"; touch /tmp/v-done
