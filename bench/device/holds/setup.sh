#!/usr/bin/env bash
# Started detached (setsid) by the second staging call, once the bundle is joined: the bundle installed, the patch set
# applied, GSM8K prepared, while the model's chunks are still arriving; a hold waits for /tmp/setup-done.
cd /tmp/code
date -u +"setup start %FT%TZ"
bash /tmp/bundle/install.sh && export BENCH_NO_RANDOM=1 && source bench/device/gpu_setup.sh && touch /tmp/setup-done
date -u +"setup end %FT%TZ"
