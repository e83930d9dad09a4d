#!/usr/bin/env bash
# Issue 67's random-weights timing pair (the <= 90 s target): the masked P40-path bench before (verl's pass and
# micro-batches, no compaction) and with the three speed-ups the p40 plan sets since 2026-12-06 (`compact`: the
# rollout's log-probs, the length-grouped update at the plan's budget, the decoder's compaction), back to back on one
# machine, then the band. Needs only the bundle and the code (no model chunks: random weights). Detached by the launch
# call (setsid), from the code copy in /tmp/code, once setup.sh has written /tmp/setup-done; /tmp/hold-done at its end.
# Usage: bash pair67.sh [VARIANTS]: `compact` alone (~4 minutes) where a session's device time cannot hold the pair;
# `compact-audited` (~5 minutes) the 2026-12-06/07 path under the op audit; `compact,grouped` that path against the one
# the p40 plan sets since 2026-12-07, with the prompt passes by length (p40_prefill_groups=8); `grouped-audited` that
# one under the op audit (update_phases.py's VARIANTS).
variants=${1:-before,compact}
cd /tmp/code
source bench/device/holds/start.sh "pair67 $variants"
W=/tmp/pair67
mkdir -p $W
# bench's common arguments name .gpu-shared's tokenizer and config folder: the code copy has them as test fixtures
mkdir -p .gpu-shared && ln -sfn "$PWD/tests/fixtures/qwen2.5-0.5b-instruct" .gpu-shared/qwen2.5-0.5b-instruct
python3 bench/device/make_random_model.py --config tests/fixtures/qwen2.5-0.5b-instruct --out /tmp/qwen-random \
  > /tmp/random.log 2>&1 || { echo "random model failed"; touch /tmp/hold-done; exit 4; }
date -u +"timing pair %FT%TZ"
python3 bench/experiments/update_phases.py bench --variants "$variants" --out $W/timing-pair > $W/session.log 2>&1
echo "timing pair rc=$?"
date -u +"hold end %FT%TZ"; touch /tmp/hold-done
