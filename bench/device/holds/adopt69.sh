#!/usr/bin/env bash
# Issue 69, the nominated variant's adoption run: grpo-gsm8k without the KL loss, unmasked (learning's fast path), as
# long as the hold allows up to STEPS (80), saved every 20 steps, validated every 10, then the whole test split at the
# steps named before the run: 60 and STEPS (horizon --score-steps). SEED is verl's data order (main_ppo reads
# data.seed, 1 when absent): 2 for the first run, 3 for the second (1 was the nominating run's). Detached by the
# launch call (setsid), from the code copy in /tmp/code (code.sh); the base's 1,319 answers are horizon-2026-12-03's,
# as for the variants; /tmp/hold-done at its end. Usage: bash adopt69.sh SEED [STEPS [KEY=VALUE ...]]: each KEY=VALUE
# after STEPS is one more verl override on top of the no-KL recipe (e.g. actor_rollout_ref.actor.clip_ratio_high=0.28,
# the candidate named after seed 2's entropy collapse: bench/next-device-session.md, session 21)
seed=${1:?seed}; steps=${2:-80}
extra=()
for kv in "${@:3}"; do extra+=(--override "$kv"); done
cd /tmp/code
source bench/device/holds/start.sh "seed $seed steps $steps ${*:3}"
python3 bench/learning_run.py prepare --tokenizer tests/fixtures/qwen2.5-0.5b-instruct --gsm8k tests/fixtures/gsm8k \
  > /tmp/prep.log 2>&1 || { echo "prepare failed"; touch /tmp/hold-done; exit 5; }
tar xzf bench/results/horizon-2026-12-03/learning-work.tgz -C /tmp/learn eval-base
# the trainer's time: the deadline less two scorings (merge + 1,319 answers, 87 s each on 2026-12-06) and a margin;
# the graceful stop is given 40 s (one ~12 s step and its save)
left=$(( $(cat /tmp/deadline) - $(date +%s) - 200 ))
date -u +"session %FT%TZ budget ${left}s"
python3 bench/learning_run.py session --mode fast --no-eval --steps "$steps" --save-freq 20 --test-freq 10 \
  --budget-s $left --stop-s 40 --override actor_rollout_ref.actor.use_kl_loss=false --override "+data.seed=$seed" \
  --override trainer.max_actor_ckpt_to_keep=4 "${extra[@]}" > /tmp/learn/session.log 2>&1
echo "session rc=$?"; date -u +"horizon %FT%TZ"
# the steps named before the run; one the deadline stopped the run before is said, and the others are still scored
scored=60
if ls -d /tmp/learn/ckpt/*/global_step_"$steps" > /dev/null 2>&1; then scored="60,$steps"; else
  echo "ended early: step $steps was not reached (not counted for adoption); scoring step 60 alone"; fi
python3 bench/learning_run.py horizon --score-steps "$scored" > /tmp/learn/horizon.log 2>&1
echo "horizon rc=$?"; date -u +"hold end %FT%TZ"; touch /tmp/hold-done
