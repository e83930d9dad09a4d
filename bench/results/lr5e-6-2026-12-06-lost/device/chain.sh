#!/usr/bin/env bash
# Session 16's one hold, detached (setsid) by the launch call: issue 69's variant (2), then issue 67's 20-step P40-path
# validation, one after the other (one trainer on the GPU at a time), with no device call's gap between them.
echo $$ > /tmp/chain.pid
date -u +"chain start %FT%TZ"
bash /tmp/code/run69/launch.sh actor_rollout_ref.actor.optim.lr=5e-6 > /tmp/learn-launch.log 2>&1
date -u +"issue 69 ended %FT%TZ"
bash /tmp/code/run69/v67.sh > /tmp/v-launch.log 2>&1
date -u +"chain end %FT%TZ"
touch /tmp/chain-done
