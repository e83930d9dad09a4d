#!/usr/bin/env bash
# Each follow-up call of hold.sh: waits until the decoder check has ended (then returns with it), after that until the
# hold has; the hold gone or the deadline near ends the wait too. Every call copies what there is into $OUT.
done_file=/tmp/decode-done; log=/tmp/decode.log
[ -f /tmp/decode-reported ] && { done_file=/tmp/hold-done; log=/tmp/phases.log; }
python3 /tmp/code/bench/device/follow.py --pid-file /tmp/hold.pid --done $done_file --deadline-file /tmp/deadline \
  --limit-s "${1:-570}" --log $log --tail 6
[ -f /tmp/decode-done ] && touch /tmp/decode-reported
cat /tmp/hold.log; tail -n 4 /tmp/setup.log /tmp/prep.log 2>/dev/null
for d in decode update-phases; do [ -d /tmp/$d ] && cp -r /tmp/$d "$OUT/"; done
cp /tmp/hold.log /tmp/setup.log /tmp/prep.log /tmp/decode.log /tmp/phases.log /tmp/hold-setup.log "$OUT/" 2>/dev/null
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader; ls -la "$OUT"; true
