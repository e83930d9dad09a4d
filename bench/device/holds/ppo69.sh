#!/usr/bin/env bash
# Issue 69, PPO's chance: ppo-gsm8k (actor + critic) unmasked on the real-weights stand-in for the trainer wall time the
# default's 60 steps took (horizon-2026-12-03: 847.9 s, 14.13 GPU-minutes, start-up and validation included), validated
# every 10 steps; the graceful stop saves its last step (verl saves on a stop only where save_freq > 0: 100, past
# the budget) and the session's `final` scores it on the whole test split
# against the base (its last step is the one named before the run). Then, here:
#   python3 bench/learning_run.py compare --axis gpu-minutes <both runs' learning-*.json>
# Detached by the launch call (setsid), from the code copy in /tmp/code (code.sh); /tmp/hold-done at its end.
cd /tmp/code
source bench/device/holds/start.sh ppo
python3 bench/learning_run.py prepare --tokenizer tests/fixtures/qwen2.5-0.5b-instruct --gsm8k tests/fixtures/gsm8k \
  > /tmp/prep.log 2>&1 || { echo "prepare failed"; touch /tmp/hold-done; exit 5; }
date -u +"session %FT%TZ"
python3 bench/learning_run.py session --mode fast --algorithm ppo-gsm8k --steps 200 --save-freq 100 --test-freq 10 \
  --budget-s 848 --stop-s 40 > /tmp/learn/session.log 2>&1
echo "session rc=$?"; date -u +"hold end %FT%TZ"; touch /tmp/hold-done
