#!/usr/bin/env bash
# Each follow-up call of a hold (validate67.sh, adopt69.sh): waits until the hold has ended or died, or the session's
# deadline is near (bench/device/follow.py), then packs what the hold's work folder has made so far (no model states)
# into $OUT. Usage: bash follow.sh WORK [LIMIT_S]
work=${1:?work folder}; limit=${2:-570}
python3 /tmp/code/bench/device/follow.py --pid-file /tmp/hold.pid --done /tmp/hold-done --deadline-file /tmp/deadline \
  --limit-s "$limit" --log "$work/session.log" --tail 4
cat /tmp/hold.log
grep -oE "step:[0-9]+ |val-core/[^ ]*|timing_s/step:[0-9.]+|peak_allocated_gb/update_actor:[^ ]*" "$work/session.log" \
  2>/dev/null | paste -sd' ' | tail -c 2000; echo
tail -n 12 "$work/horizon.log" 2>/dev/null
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
[ -d "$work" ] && (cd "$work" && find . -type f -size -8M ! -path './qwen-real/*' ! -path './gsm8k/*' ! -name '*.pt' \
  ! -name '*.safetensors' ! -name 'tokenizer.json' ! -name 'vocab.json' ! -name 'merges.txt' | tar czf "$OUT/work.tgz" -T -)
tar czf "$OUT/logs.tgz" -C /tmp hold.log setup.log hold-setup.log prep.log config-notes.txt update-tokens.txt 2>/dev/null
ls -la "$OUT"; true
