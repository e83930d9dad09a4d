#!/usr/bin/env bash
# Each follow-up call of chain.sh (bench/device/follow.py waits): until issue 69's run has ended (then it returns at
# once, with that run's results), after that until issue 67's has; the run gone, or the session's deadline near, ends
# the wait too. Every call packs what both runs have made so far (no model states) into $OUT.
limit=${1:-570}
done_file=/tmp/learn-done; log=/tmp/learn/session.log
[ -f /tmp/learn-reported ] && { done_file=/tmp/v-done; log=/tmp/learn67/session.log; }
python3 /tmp/code/bench/device/follow.py --pid-file /tmp/chain.pid --done $done_file --deadline-file /tmp/deadline \
  --limit-s "$limit" --log $log --tail 4
[ -f /tmp/learn-done ] && touch /tmp/learn-reported
cat /tmp/chain.log /tmp/learn-launch.log /tmp/v-launch.log 2>/dev/null
for w in learn learn67; do
  grep -oE "step:[0-9]+ |val-core/[^ ]*|timing_s/step:[0-9.]+|peak_allocated_gb/update_actor:[^ ]*" /tmp/$w/session.log \
    2>/dev/null | paste -sd' ' | tail -c 2000; echo
done
tail -n 12 /tmp/learn/horizon.log 2>/dev/null
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
for w in learn learn67; do
  [ -d /tmp/$w ] && (cd /tmp/$w && find . -type f -size -8M ! -path './qwen-real/*' ! -path './gsm8k/*' \
    ! -name '*.pt' ! -name '*.safetensors' ! -name 'tokenizer.json' ! -name 'vocab.json' ! -name 'merges.txt' \
    | tar czf "$OUT/$w.tgz" -T -)
done
tar czf "$OUT/logs.tgz" -C /tmp chain.log setup.log learn-launch.log v-launch.log v-prep.log config-notes.txt \
  update-tokens.txt 2>/dev/null
ls -la "$OUT"; true
