# The GPU side of issue 60's "no separate pass for the old log-probs", for a session with a device (agreement
# ran on random weights on 2026-12-05, by hand: results/speedups-2026-12-05; validate not yet):
#   agreement  the rollout's log-probs against verl's old_log_prob pass on the real-weights stand-in, under the Pascal
#              mask with the 24 GB cap (bench/experiments/rollout_log_probs.py: 256 GSM8K test prompts, 512 new
#              tokens, the recipe's temperature 1.0). The timed before/after (`verl-p40 bench` with the pass and
#              with p40_log_probs=auto) are bench/experiments/update_phases.py's variants `before` and `log-probs`
#   validate   the 20-step P40-path run of bench/results/p40-path-2026-12-04 again with both speed-ups (p40_log_probs=auto:
#              no pass; p40_update_tokens, the token budget the plan offers for this model at 24 GB, read from its
#              `update: ...` line in $OUT/config-notes.txt and kept in $OUT/update-tokens.txt; none offered: stop),
#              detached (its budget is longer than one call), validated at 0, 10 and 20 (its table beside today's)
#   wait       each follow-up call of `validate` (send it as soon as the one before returns: the machine goes back
#              30 s after a call), copying what the run has made so far to $OUT
# Staged first as bench/README.md "Device staging" says: /tmp/bundle (the bundle's chunks joined), the real-weights
# GGUF's chunks in /tmp/chunks/model, .gpu-shared (the Pascal mask, GSM8K, the tokenizer) carried with the first call.
# Each call starts with:  bash /tmp/bundle/install.sh && bash bench/experiments/rollout_log_probs_gpu.sh PHASE
set -euo pipefail
offered_update_tokens() {  # the actor's token budget in the plan's `update: ...` offer line (verl-p40 config's stderr)
  sed -n 's/^.*update: .*length-grouped [a-z-]* of \([0-9][0-9]*\) tokens.*$/\1/p' "$1" | head -n 1
}
[ "${1:-}" = offered-update-tokens ] && { offered_update_tokens "$2"; exit 0; }  # for the test
PHASE=${1:?agreement, validate or wait}
OUT=${OUT:?set by the device call}
[ -f /tmp/model.gguf ] || python3 bench/device/chunks.py join --chunks /tmp/chunks/model --out /tmp/model.gguf
[ "$PHASE" = agreement ] || export BENCH_NO_RANDOM=1  # only the bench runs on random weights
source bench/device/gpu_setup.sh
MASKED=(env "PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH" PASCAL_MASK=1)
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true

if [ "$PHASE" = agreement ]; then
  python3 bench/learning_run.py prepare --tokenizer "$GPU_DATA/qwen2.5-0.5b-instruct" --gsm8k "$GPU_DATA/gsm8k"
  "${MASKED[@]}" python3 -m verl_p40.cli config --profile p40 --model /tmp/learn/qwen-real --data /tmp/learn/gsm8k \
    --gpu-memory-cap-gb 24 > /tmp/p40.yaml 2> "$OUT/config-notes.txt"
  "${MASKED[@]}" VERL_P40_GPU_MEMORY_CAP_GB=24 python3 bench/experiments/rollout_log_probs.py --config /tmp/p40.yaml \
    --model /tmp/learn/qwen-real --data /tmp/learn/gsm8k/test.parquet --questions 256 --new-tokens 512 \
    --out "$OUT/agreement" 2>&1 | tail -n 40 | tee "$OUT/agreement.log"
elif [ "$PHASE" = validate ]; then  # p40-path-2026-12-04's command, with the plan's default of today
  python3 bench/learning_run.py prepare --tokenizer "$GPU_DATA/qwen2.5-0.5b-instruct" --gsm8k "$GPU_DATA/gsm8k"
  "${MASKED[@]}" python3 -m verl_p40.cli config --profile p40 --model /tmp/learn/qwen-real --data /tmp/learn/gsm8k \
    --gpu-memory-cap-gb 24 > /dev/null 2> "$OUT/config-notes.txt"
  TOKENS=$(offered_update_tokens "$OUT/config-notes.txt")
  [ -n "$TOKENS" ] || { echo "rollout_log_probs_gpu.sh: the plan offered no update token budget" >&2; exit 3; }
  echo "$TOKENS" > "$OUT/update-tokens.txt"
  rm -rf /tmp/repo && cp -r "$PWD" /tmp/repo && cd /tmp/repo
  export TOKENS
  setsid bash -c 'python3 bench/learning_run.py session --mode p40 --no-eval --steps 20 --save-freq 10 --override actor_rollout_ref.rollout.p40_log_probs=auto \
    --override actor_rollout_ref.actor.p40_update_tokens=$TOKENS \
    --test-freq 10 --budget-s 1080 --stop-s 80 > /tmp/learn/session.log 2>&1; touch /tmp/learn/done' \
    < /dev/null > /dev/null 2>&1 &
  sleep 500; cp /tmp/learn/session.log "$OUT/" || true
elif [ "$PHASE" = wait ]; then
  python3 bench/learning_run.py wait --timeout-s 540 --copy-to "$OUT/partial"
  cp -r /tmp/learn/out "$OUT/learn-out" 2>/dev/null || true
else
  echo "rollout_log_probs_gpu.sh: unknown phase $PHASE (agreement, validate or wait)" >&2
  exit 2
fi
