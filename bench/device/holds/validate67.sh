#!/usr/bin/env bash
# Issue 67, item 2 whole, with the decoder's compaction: the P40-path run (Pascal mask, 24 GB cap, kernel check
# skipped) with both speed-ups (p40_log_probs=auto, the p40_update_tokens the plan offers, read from its `update:` line)
# and actor_rollout_ref.rollout.p40_decode_compact=true, 20 steps validated at 0, 10 and 20. Detached by the launch call
# (setsid), from the code copy in /tmp/code, once setup.sh has written /tmp/setup-done; /tmp/hold-done at its end.
cd /tmp/code
source bench/device/holds/start.sh validate67
W=/tmp/learn67
date -u +"prepare %FT%TZ"
python3 bench/learning_run.py prepare --work $W --out $W/out --tokenizer tests/fixtures/qwen2.5-0.5b-instruct \
  --gsm8k tests/fixtures/gsm8k > /tmp/prep.log 2>&1 || { echo "prepare failed"; touch /tmp/hold-done; exit 5; }
env PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 PASCAL_MASK_CC=6.1 python3 -m verl_p40.cli config --profile p40 \
  --model $W/qwen-real --data $W/gsm8k --gpu-memory-cap-gb 24 > /dev/null 2> /tmp/config-notes.txt
T=$(sed -n 's/^.*update: .*--set actor_rollout_ref\.actor\.p40_update_tokens=\([0-9][0-9]*\).*$/\1/p' /tmp/config-notes.txt | head -n1)
echo "$T" > /tmp/update-tokens.txt
[ -n "$T" ] || { echo "no update offered"; cat /tmp/config-notes.txt; touch /tmp/hold-done; exit 3; }
left=$(( $(cat /tmp/deadline) - $(date +%s) - 40 ))
date -u +"session %FT%TZ budget ${left}s tokens $T"
python3 bench/learning_run.py session --work $W --out $W/out --mode p40 --no-eval --steps 20 --save-freq -1 \
  --test-freq 10 --budget-s $left --stop-s 60 --override actor_rollout_ref.rollout.p40_log_probs=auto \
  --override actor_rollout_ref.actor.p40_update_tokens=$T \
  --override actor_rollout_ref.rollout.p40_decode_compact=true > $W/session.log 2>&1
echo "session rc=$?"
# then, if the deadline leaves room (two 3-step masked benches, ~7 minutes), the random-weights timing pair on this
# machine: both speed-ups without and with the compaction (the <= 90 s target's measurement)
if [ $(( $(cat /tmp/deadline) - $(date +%s) )) -gt 620 ]; then
  date -u +"timing pair %FT%TZ"
  source bench/device/holds/timing_pair.sh
  timing_pair both,compact $W/timing-pair $W/timing-pair.log
  echo "timing pair rc=$?"
fi
date -u +"hold end %FT%TZ"; touch /tmp/hold-done
