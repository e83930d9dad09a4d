#!/usr/bin/env bash
# One follow-up device call: wait up to $1 s, but stop as soon as the run has ended (/tmp/learn-done) or its launcher
# is gone, or the session's device time is nearly spent (/tmp/deadline, written by the first call); then print where
# the run is and pack what it has made so far (no model states) into $OUT/learn.tgz.
limit=${1:-540}
end=$((SECONDS + limit))
dl=$(cat /tmp/deadline 2>/dev/null || echo 0); now=$(date +%s)
[ "$dl" -gt 0 ] && [ $((dl - now)) -lt $limit ] && end=$((SECONDS + dl - now))
pid=$(cat /tmp/learn-launcher.pid 2>/dev/null)
[ -n "$pid" ] || { echo "no launcher pid: nothing was launched on this machine"; exit 2; }
while [ ! -f /tmp/learn-done ] && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
date -u +"follow %FT%TZ"
[ -f /tmp/learn-done ] && echo "RUN DONE" || { kill -0 "$pid" 2>/dev/null && echo "RUN STILL GOING" || echo "LAUNCHER GONE WITHOUT done"; }
cat /tmp/setup.log | tail -n 5; cat /tmp/learn-launch.log
grep -oE "step:[0-9]+ |val-core/[^ ]*|timing_s/step:[0-9.]+" /tmp/learn/session.log 2>/dev/null | paste -sd' ' | tail -c 2500; echo
tail -n 4 /tmp/learn/session.log 2>/dev/null; tail -n 30 /tmp/learn/horizon.log 2>/dev/null
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
cd /tmp/learn 2>/dev/null && find . -type f -size -8M ! -path './qwen-real/*' ! -path './gsm8k/*' \
  ! -name '*.pt' ! -name '*.safetensors' ! -name 'tokenizer.json' ! -name 'vocab.json' ! -name 'merges.txt' \
  | tar czf "$OUT/learn.tgz" -T - && ls -la "$OUT"
cp /tmp/learn-launch.log /tmp/setup.log "$OUT/" 2>/dev/null; true
