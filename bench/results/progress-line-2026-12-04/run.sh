#!/usr/bin/env bash
# Issue 58: a real few-step CPU run of `verl-p40 train` (verl 0.5.0's own PPO loop, patched by the CLI, on a tiny
# 2-layer Qwen2 with the real tokenizer, as tests/unit_run/test_trainer_cpu.py runs it), its console with the progress
# line a step, its logs/status.json, and `verl-p40 status` while it runs and after it ended. From the repository root,
# with the test venv (.venv), under the Ray lock (`ray stop --force` stops every Ray of the machine):
#   flock /tmp/ray-tests.lock bash bench/results/progress-line-2026-12-04/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/progress-line-2026-12-04
work=${WORK:-/tmp/progress-line}
bin=$PWD/.venv/bin
rm -rf "$work" && mkdir -p "$work"
"$bin/python" tests/tiny_model.py tests/fixtures/qwen2.5-0.5b-instruct "$work/model" > /dev/null
# 40 rows a split, 4 of train held out as val.parquet (36 left: 9 steps of 4 prompts, so the epoch holds the 6 steps):
# the run validates before step 1, at steps 3 and 6, and saves at steps 3 and 6
"$bin/verl-p40" prep --source tests/fixtures/gsm8k --out "$work/data" --limit 40 --val-size 4 > /dev/null
verl=$("$bin/python" -c "from verl_p40 import patches; print(patches.default_verl_dir())")
mkdir -p "$work/patched" && cp -r "$verl" "$work/patched/verl" && "$bin/verl-p40" patch-verl "$work/patched/verl" > /dev/null
export PYTHONPATH=$PWD/tests/cpu_shims:$work/patched VERL_P40_CPU_SHIMS=1 RAY_USAGE_STATS_ENABLED=0 \
  TOKENIZERS_PARALLELISM=false VERL_P40_DOCTOR_SKIP=gpu,kernels,compute PATH=$bin:$PATH
"$bin/ray" start --head --num-cpus 4 --num-gpus 1 --resources '{"cpu": 4}' --include-dashboard=false \
  --disable-usage-stats --temp-dir="$work/ray" > "$work/ray-start.log" 2>&1
trap '"$bin/ray" stop --force > /dev/null 2>&1 || true' EXIT
export RAY_ADDRESS=auto
cpu=(trainer.device=cpu actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.ref.strategy=fsdp2 critic.strategy=fsdp2
  data.dataloader_num_workers=0 trainer.logger=[console] data.train_batch_size=4
  actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
  critic.ppo_micro_batch_size_per_gpu=2 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 data.max_response_length=16
  trainer.ray_wait_register_center_timeout=180 actor_rollout_ref.actor.fsdp_config.optimizer_offload=false
  actor_rollout_ref.ref.fsdp_config.param_offload=false critic.model.fsdp_config.param_offload=false
  critic.model.fsdp_config.optimizer_offload=false)
"$bin/verl-p40" train --algorithm ppo --profile p40 --model "$work/model" --data "$work/data" \
  --checkpoints "$work/ckpt" --logs "$work/logs" "${cpu[@]}" \
  trainer.total_training_steps=6 trainer.test_freq=3 trainer.save_freq=3 > "$work/console.txt" 2>&1 &
trainer=$!
# `verl-p40 status` from another shell every 2 s while the run lives; the status file kept as it was after step 4
: > "$work/status-during.txt"
while kill -0 "$trainer" 2>/dev/null; do
  { printf '%s $ verl-p40 status\n' "$(date -u +%H:%M:%S)"; "$bin/verl-p40" status --logs "$work/logs" 2>&1 || echo "(exit $?)"; } >> "$work/status-during.txt"
  grep -q '"step": 4,' "$work/logs/status.json" 2>/dev/null && [ ! -e "$work/status-during.json" ] && cp "$work/logs/status.json" "$work/status-during.json"
  sleep 2
done
wait "$trainer" && rc=0 || rc=$?
echo "verl-p40 train exit $rc" >> "$work/console.txt"
{ echo "$ verl-p40 status"; "$bin/verl-p40" status --logs "$work/logs" && echo "(exit 0)" || echo "(exit $?)"; } > "$work/status-after.txt" 2>&1
cp "$work/console.txt" "$work/status-during.txt" "$work/status-after.txt" "$out/"
cp "$work/status-during.json" "$out/status-during.json" 2>/dev/null || true
cp "$work/logs/status.json" "$out/status-after.json"
cp "$(ls "$work"/logs/train-*.log | head -1)" "$out/train.log"
echo "train exit $rc; results in $out"
exit "$rc"
