#!/usr/bin/env bash
# Issue 67, item 4: the timing pair (masked P40 path, random weights, 3-step benches back to back on one machine):
# verl's pass and micro-batches (before) against both speed-ups with the budget the fixed plan offers (both), then
# both under the op audit. Started detached (setsid) from /tmp/code, a copy of main's checkout.
cd /tmp/code
echo $$ > /tmp/r67.pid
date -u +"setup %FT%TZ"
bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh || { echo "SETUP FAILED"; touch /tmp/r67-done; exit 3; }
set +euo pipefail
mkdir -p /tmp/r67/update-bench
# issue 68 item 8: every process's resident memory every 5 s (the trainer's driver and Ray's workers), for the
# per-GPU-worker host-memory term
( while [ ! -f /tmp/r67-done ]; do date -u +"at %FT%TZ"; ps -eo pid,rss,args --sort=-rss | head -12 | cut -c1-160; sleep 5; done ) > /tmp/r67/update-bench/rss.log 2>&1 &
date -u +"pair %FT%TZ"
timeout 560 python3 bench/experiments/update_phases.py bench --variants before,both --out /tmp/r67/update-bench
echo "pair rc=$?"
date -u +"audit %FT%TZ"
timeout 380 python3 bench/experiments/update_phases.py bench --variants audited --out /tmp/r67/update-bench
echo "audit rc=$?"
date -u +"end %FT%TZ"
touch /tmp/r67-done
