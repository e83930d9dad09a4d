#!/usr/bin/env bash
# One follow-up call: wait up to $1 s, stopping as soon as the run has ended or its pid is gone, or the device time is
# nearly spent (/tmp/deadline); then copy what it has made so far to $OUT.
limit=${1:-560}; end=$((SECONDS + limit))
dl=$(cat /tmp/deadline 2>/dev/null || echo 0); now=$(date +%s)
[ "$dl" -gt 0 ] && [ $((dl - now)) -lt $limit ] && end=$((SECONDS + dl - now))
pid=$(cat /tmp/r67.pid 2>/dev/null)
[ -n "$pid" ] || { echo "no pid: nothing was launched on this machine"; exit 2; }
while [ ! -f /tmp/r67-done ] && kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
date -u +"follow %FT%TZ"
[ -f /tmp/r67-done ] && echo "RUN DONE" || { kill -0 "$pid" 2>/dev/null && echo "RUN STILL GOING" || echo "RUN GONE WITHOUT done"; }
tail -n 25 /tmp/r67.log
nvidia-smi --query-gpu=name,memory.used,utilization.gpu,driver_version --format=csv,noheader
mkdir -p "$OUT/update-bench"
cp /tmp/r67.log "$OUT/" 2>/dev/null
cd /tmp/r67/update-bench 2>/dev/null && for f in before.json both.json audited.json summary.json audit.jsonl bench.log rss.log; do [ -f "$f" ] && cp "$f" "$OUT/update-bench/"; done
ls -la "$OUT" "$OUT/update-bench"; true
