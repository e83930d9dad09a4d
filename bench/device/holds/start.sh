# Sourced first by every hold (from /tmp/code): its pid for the follow-ups, the wait for setup.sh, the GPU machine's
# environment (bench/device/gpu_setup.sh). A hold whose setup never finished ends here, with /tmp/hold-done.
echo $$ > /tmp/hold.pid
date -u +"hold start %FT%TZ $*"
for i in $(seq 150); do [ -f /tmp/setup-done ] && break; sleep 2; done
[ -f /tmp/setup-done ] || { echo "setup did not finish"; touch /tmp/hold-done; exit 3; }
export BENCH_NO_RANDOM=1
source bench/device/gpu_setup.sh > /tmp/hold-setup.log 2>&1
set +e
