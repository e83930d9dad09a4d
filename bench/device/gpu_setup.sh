# Sourced at the start of a command on the lent GPU machine (see bench/README.md):
#   bash .gpu-bundle/install.sh && source bench/device/gpu_setup.sh
# Puts verl 0.5.0 and friends (the carried bundle) and this checkout on the path, applies the verl patch set
# through the product's CLI, prepares GSM8K and builds the random-weight Qwen2.5-0.5B-shaped model.
set -euo pipefail
export PYTHONPATH=/tmp/site:$PWD/app:$PWD/bench:${PYTHONPATH:-}
export VERL_P40_PROFILES_DIR=$PWD/config/profiles
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
verl_p40() { python3 -m verl_p40.cli "$@"; }
verl_p40 patch-verl /tmp/site/verl
verl_p40 patch-verl --check /tmp/site/verl
[ -f /tmp/gsm8k/train.parquet ] || verl_p40 prep --source .gpu-shared/gsm8k --out /tmp/gsm8k \
  --tokenizer .gpu-shared/qwen2.5-0.5b-instruct
[ -n "${VERL_P40_NO_RANDOM:-}" ] || [ -f /tmp/qwen-random/config.json ] || python3 bench/device/make_random_model.py \
  --config .gpu-shared/qwen2.5-0.5b-instruct --out /tmp/qwen-random
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
