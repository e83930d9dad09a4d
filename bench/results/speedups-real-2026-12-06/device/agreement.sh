#!/usr/bin/env bash
# Issue 67, item 1, only if the session's device time allows after issue 69's run: the real-weights agreement
# (bench/experiments/rollout_log_probs_gpu.sh agreement: masked, 24 GB cap, 256 test prompts, 512 new tokens), cut
# off before the session's deadline (/tmp/deadline, written by the first call).
cd /tmp/code
left=$(( $(cat /tmp/deadline 2>/dev/null || echo 0) - $(date +%s) ))
[ -f /tmp/learn-done ] || { echo "issue 69's run has not ended: no agreement"; exit 2; }
[ "$left" -gt 300 ] || { echo "only ${left}s of device time left: no agreement"; exit 2; }
cp -r /tmp/learn/out "$OUT/learn-out" 2>/dev/null
date -u +"agreement start %FT%TZ (${left}s left)"
timeout $((left - 40)) bash bench/experiments/rollout_log_probs_gpu.sh agreement > "$OUT/agreement-run.log" 2>&1
echo "agreement rc=$?"; date -u +"agreement end %FT%TZ"
tail -n 30 "$OUT/agreement-run.log"
