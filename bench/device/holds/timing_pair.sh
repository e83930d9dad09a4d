# Sourced by the holds that time the masked P40 path on random weights (pair67.sh, grouped67.sh, validate67.sh):
# `timing_pair VARIANTS OUT LOG` builds the random-weights model from the tokenizer's config (bench's common arguments
# name .gpu-shared's tokenizer and config folder: the code copy has them as test fixtures), then runs
# update_phases.py bench with those variants back to back on this machine; its return code is the bench's, or 4 when
# the random model could not be made.
timing_pair() {
  local variants=${1:?variants} out=${2:?out folder} log=${3:?log file}
  mkdir -p .gpu-shared && ln -sfn "$PWD/tests/fixtures/qwen2.5-0.5b-instruct" .gpu-shared/qwen2.5-0.5b-instruct
  python3 bench/device/make_random_model.py --config tests/fixtures/qwen2.5-0.5b-instruct --out /tmp/qwen-random \
    > /tmp/random.log 2>&1 || { echo "random model failed"; return 4; }
  python3 bench/experiments/update_phases.py bench --variants "$variants" --out "$out" > "$log" 2>&1
}
