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
source bench/device/holds/timing_pair.sh
date -u +"timing pair %FT%TZ"
timing_pair "$variants" $W/timing-pair $W/session.log
echo "timing pair rc=$?"
date -u +"hold end %FT%TZ"; touch /tmp/hold-done
