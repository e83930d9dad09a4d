# Sourced at the start of a command on the lent GPU machine (see bench/README.md):
#   bash /tmp/bundle/install.sh && source bench/device/gpu_setup.sh
# Puts verl 0.5.0 and friends (the bundle, staged as bench/README.md says) and this checkout on the path, applies the verl patch set
# through the product's CLI, prepares GSM8K and builds the random-weight Qwen2.5-0.5B-shaped model.
set -euo pipefail
export PYTHONPATH=/tmp/site:$PWD/app:$PWD/bench:${PYTHONPATH:-}
export VERL_P40_PROFILES_DIR=$PWD/config/profiles
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
verl_p40() { python3 -m verl_p40.cli "$@"; }
verl_p40 patch-verl /tmp/site/verl
verl_p40 patch-verl --check /tmp/site/verl
# GSM8K and Qwen2.5's tokenizer: a carried .gpu-shared copy of ../shared/data, else the repo's own test fixtures
# (the same files; carrying them again with the bundle goes over what one call may carry)
GPU_DATA=.gpu-shared
[ -d "$GPU_DATA/gsm8k" ] || GPU_DATA=tests/fixtures
export GPU_DATA
# the Pascal mask, carried in .gpu-shared/pascal-mask: copied out of the checkout for processes that outlive the call
if [ -d .gpu-shared/pascal-mask ]; then mkdir -p /tmp/pascal-mask && cp .gpu-shared/pascal-mask/* /tmp/pascal-mask/; fi
[ -d /tmp/pascal-mask ] && export PASCAL_MASK_DIR=/tmp/pascal-mask
# the whole train split, no val.parquet (prep's default holds 256 rows out, and a data folder with one turns the
# trainer's validation on): the benches time steps; those that validate make their own folder (learning_run prepare)
[ -f /tmp/gsm8k/train.parquet ] || verl_p40 prep --source "$GPU_DATA/gsm8k" --out /tmp/gsm8k --val-size 0 \
  --tokenizer "$GPU_DATA/qwen2.5-0.5b-instruct"
[ -n "${BENCH_NO_RANDOM:-}" ] || [ -f /tmp/qwen-random/config.json ] || python3 bench/device/make_random_model.py \
  --config "$GPU_DATA/qwen2.5-0.5b-instruct" --out /tmp/qwen-random
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
