#!/usr/bin/env bash
# Issue 69, two trainers on one GPU, measured once: `learning_run.py pair` (bench/lib/learning_pair.py), the default
# recipe unmasked on the real-weights stand-in, 10 steps each, not validated or saved, the same memory cap each (half
# the GPU less 2 GB: 37 GB on an H100), first together (each its own Ray instance), then the same two in a row
# (6.3 + 8.3 minutes on an H100, 2026-12-07). Detached by the launch call (setsid), from the code copy in /tmp/code (code.sh); the
# model's chunks are staged as for adopt69.sh; then, if the deadline leaves room, issue 67's pair67.sh; /tmp/hold-done
# at its end. Usage: bash pair69.sh
cd /tmp/code
source bench/device/holds/start.sh pair
python3 bench/learning_run.py prepare --tokenizer tests/fixtures/qwen2.5-0.5b-instruct --gsm8k tests/fixtures/gsm8k \
  > /tmp/prep.log 2>&1 || { echo "prepare failed"; touch /tmp/hold-done; exit 5; }
# both rounds inside the deadline, less a margin for the follow-up that packs the results
left=$(( $(cat /tmp/deadline) - $(date +%s) - 30 ))
date -u +"pair %FT%TZ budget ${left}s"
python3 bench/learning_run.py pair --mode fast --steps 10 --budget-s "$left" > /tmp/learn/session.log 2>&1
echo "pair rc=$?"
# then issue 67's random-weights timing pair on the same machine where the deadline leaves room (pair67.sh: ~8 minutes
# for before,compact, ~4 for compact alone; it ends the hold with /tmp/hold-done); the follow-ups pack /tmp/pair67 too
left=$(( $(cat /tmp/deadline) - $(date +%s) ))
if [ "$left" -gt 540 ]; then exec bash bench/device/holds/pair67.sh before,compact; fi
if [ "$left" -gt 300 ]; then exec bash bench/device/holds/pair67.sh compact; fi
date -u +"hold end %FT%TZ"; touch /tmp/hold-done
