#!/usr/bin/env bash
pid=$(cat /tmp/v.pid); end=$(cat /tmp/deadline)
while [ ! -f /tmp/v-done ] && kill -0 $pid 2>/dev/null && [ $(date +%s) -lt $((end - 15)) ] && [ $SECONDS -lt ${1:-560} ]; do sleep 4; done
date -u; [ -f /tmp/v-done ] && echo RUN DONE || { kill -0 $pid 2>/dev/null && echo STILL GOING || echo GONE; }
cat /tmp/v-launch.log; cp /tmp/config-notes.txt /tmp/update-tokens.txt /tmp/v-prep.log /tmp/v-launch.log $OUT/ 2>/dev/null
grep -oE "step:[0-9]+ |val-core/[^ ]*|timing_s/step:[0-9.]+|peak_allocated_gb/update_actor:[^ ]*" /tmp/learn/session.log | paste -sd' ' | tail -c 3000; echo
tail -n 3 /tmp/learn/session.log | tail -c 1500
cd /tmp/learn 2>/dev/null && find . -type f -size -8M ! -path './qwen-real/*' ! -path './gsm8k/*' ! -path './ckpt/*' | tar czf $OUT/learn67.tgz -T -
nvidia-smi --query-gpu=memory.used --format=csv,noheader
