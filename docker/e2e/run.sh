#!/usr/bin/env bash
# The front door checked end to end on a real Docker engine without a GPU: the image built from the real Dockerfile
# (docker/e2e/build.sh), then the product's docker-compose.yml with the test-only override tests/e2e/compose.cpu.yaml,
# driven as a user drives it: `up trainer` (model-fetch from a local folder, data-prep, doctor, two steps of verl's
# real loop on a tiny model), `run --rm status` after it, `up -d trainer` with a doctor that fails and the status
# one-off that names it, `run --rm status` during a run, TensorBoard and gpu-monitor started and stopped beside a run,
# `stop trainer` mid-run, `up trainer` again (resume), `run --rm eval`, `run --rm export`,
# `run --rm data-prep`, gpu-monitor without a driver, and `up trainer` without the override; then another host's two
# ways to the image, each on a second engine with an empty data root and a short `up trainer`: pulled through compose
# from a real registry (Debian's docker-registry, on the loopback) by its digest, and `docker load` of a
# `docker save` file with PULL_POLICY=never (REGISTRY=0 leaves these out; they stop the first engine, which
# docker/e2e/engine.sh starts again). Every step prints its exit code; the volumes' ownership and the image's size are
# printed. Exit 0 only if every step did what it should. As root, from the repository root (inputs: tests/fixtures):
#   bash docker/e2e/run.sh [LOG]          (default log: docker/e2e/results/e2e-<date>.log; SKIP_BUILD=1 reuses the image)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
log=${1:-docker/e2e/results/e2e-$(date +%Y-%m-%d).log}
export E2E_DIR=${E2E_DIR:-/tmp/verl-p40-e2e}
mkdir -p "$(dirname "$log")" "$E2E_DIR"
exec > >(tee "$log") 2>&1
step() { printf '\n=== %s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }
failed=0
check() {  # check "what" EXPECTED_RC ACTUAL_RC
  if [ "$2" = "$3" ]; then echo "PASS  $1 (exit $3)"; else echo "FAIL  $1: exit $3, expected $2"; failed=1; fi
}
expect() {  # expect "what" COMMAND... : the command's success is the check
  if "${@:2}"; then echo "PASS  $1"; else echo "FAIL  $1"; failed=1; fi
}

step "engine"
bash docker/e2e/engine.sh
image=verl-p40:e2e
step "image: docker build of the real Dockerfile (BuildKit)"
rc=skip
if [ -n "${BUILT:-}" ]; then  # built already by docker/e2e/build.sh (.ci/run does it beside the test suite): its log
  cp "$BUILT" "$E2E_DIR/build.log" && rc=$(cat "$BUILT.rc")
elif [ -z "${SKIP_BUILD:-}" ] || ! /usr/bin/docker image inspect "$image" >/dev/null 2>&1; then
  bash docker/e2e/build.sh "$image" > "$E2E_DIR/build.log" 2>&1 && rc=0 || rc=$?
fi
if [ "$rc" != skip ]; then
  grep -E "^#[0-9]+ .*(PASS|FAIL|patches applied)|build took|^image " "$E2E_DIR/build.log" || true
  check "docker build" 0 "$rc"
  [ "$rc" = 0 ] || { tail -40 "$E2E_DIR/build.log"; exit 1; }
fi
/usr/bin/docker image ls "$image" --format 'image {{.Repository}}:{{.Tag}} {{.Size}} (uncompressed)'
[ -z "${MEASURE_PULL:-}" ] || /usr/bin/docker save "$image" | gzip -1 | wc -c | awk '{printf "image %.2f GB as docker save | gzip -1 (what a pull transfers, roughly)\n", $1/1e9}'

step "inputs: a tiny Qwen2 (the real tokenizer) as the model folder to fetch, the real GSM8K as the data source"
rm -rf "$E2E_DIR/source-model" "$E2E_DIR/exports"
# written by the image's own transformers (tests/tiny_model.py), as a user's model folder would be for it
/usr/bin/docker run --rm --entrypoint "" -u 0 -v "$repo/tests/tiny_model.py:/e2e/tiny_model.py:ro" \
  -v "$repo/tests/fixtures/qwen2.5-0.5b-instruct:/e2e/tokenizer:ro" -v "$E2E_DIR:/e2e/out" "$image" \
  python /e2e/tiny_model.py /e2e/tokenizer /e2e/out/source-model
ls "$E2E_DIR/source-model"

# The product's variables (.env.example) for this machine; the CPU run's verl values go through TRAIN_ARGS. The
# seed's PPO (one answer a prompt) and no validation slice keep a CPU step short: the default recipe's 8 answers a
# prompt and its validations are the unit tests' (tests/unit_plan, tests/image).
cpu="trainer.device=cpu actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.ref.strategy=fsdp2 critic.strategy=fsdp2"
cpu="$cpu data.dataloader_num_workers=0 trainer.logger=[console] data.train_batch_size=4"
cpu="$cpu actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"
cpu="$cpu critic.ppo_micro_batch_size_per_gpu=2 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2"
cpu="$cpu actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 data.max_response_length=16"
cpu="$cpu actor_rollout_ref.actor.fsdp_config.optimizer_offload=false actor_rollout_ref.ref.fsdp_config.param_offload=false"
cpu="$cpu critic.model.fsdp_config.param_offload=false critic.model.fsdp_config.optimizer_offload=false"
cpu="$cpu trainer.ray_wait_register_center_timeout=180 trainer.save_freq=1"
export VERL_P40_IMAGE=verl-p40 VERL_P40_TAG=e2e PULL_POLICY=never PROFILE=p40 DOCTOR_SKIP=gpu,kernels,compute \
  MODEL_FROM=/source-model MODEL_SOURCE_DIR=$E2E_DIR/source-model \
  GSM8K_SOURCE=/source GSM8K_SOURCE_DIR=$repo/tests/fixtures/gsm8k VAL_SIZE=0 ALGORITHM=ppo SHM_SIZE=2gb \
  EXPORT_DIR=$E2E_DIR/exports \
  EVAL_ARGS="--compare latest --data /data/gsm8k/test.parquet --out /logs/eval --device cpu --limit 3 --max-new-tokens 8" \
  EXPORT_ARGS="--model latest --out /exports --gguf f16"
project=verl-p40-e2e
dc() { /usr/bin/docker compose -p "$project" -f docker-compose.yml -f tests/e2e/compose.cpu.yaml "$@"; }
# every profile's containers too: a plain `down` leaves a gpu-monitor of an earlier run (profile monitor), whose
# network it removes and whose logs volume it keeps, so the next `up -d gpu-monitor` fails with "network not found"
dc_down() { dc --profile "*" down -v --remove-orphans >/dev/null 2>&1 || true; }
in_volume() {  # in_volume VOLUME COMMAND...: a command in a throwaway container of the image, the volume at /v
  /usr/bin/docker run --rm --entrypoint "" -v "${project}_$1:/v" "${in_image:-$image}" "${@:2}"
}
latest_step() { in_volume checkpoints sh -c 'cat /v/*/latest_checkpointed_iteration.txt 2>/dev/null || echo none'; }
dc_down

step "docker compose up trainer: model-fetch, data-prep, doctor, then 2 steps of verl's loop (exit code: the trainer's)"
TRAIN_ARGS="$cpu trainer.total_training_steps=2" dc up --exit-code-from trainer trainer && rc=0 || rc=$?
check "up trainer (fetch, prep, doctor, 2 steps)" 0 "$rc"
dc ps -a --format '{{.Service}} exit {{.ExitCode}}'
expect "a checkpoint of step 2 in the checkpoints volume" test "$(latest_step)" = 2
/usr/bin/docker logs "$(dc ps -aq trainer)" > "$E2E_DIR/trainer-first.log" 2>&1
grep -F "[verl-p40] step " "$E2E_DIR/trainer-first.log" | cut -c1-160
expect "the trainer's own progress line at each step" grep -q '^\[verl-p40\] step 2 of 2, .* s a step' "$E2E_DIR/trainer-first.log"
expect "and no worker's model config dump on the console (the log file keeps it)" \
  sh -c "! grep -q 'Model config after override' '$E2E_DIR/trainer-first.log'"

step "docker compose run --rm status after the run: one line, how it ended"
dc run --rm status > "$E2E_DIR/status-ended.log" 2>&1 && rc=0 || rc=$?
grep -E "^training|error" "$E2E_DIR/status-ended.log" | cut -c1-200
check "run --rm status after the run" 0 "$rc"
expect "it says the run ended at step 2 of 2" grep -q "^training ended at .*: step 2 of 2, " "$E2E_DIR/status-ended.log"

step "docker compose up -d trainer with a doctor that fails (a data folder with nothing in it): compose says only its
exit code; docker compose run --rm status names the service and its line (README, step 5)"
TRAIN_ARGS="--data /data/empty $cpu" dc up -d trainer > "$E2E_DIR/up-d-doctor.log" 2>&1 && rc=0 || rc=$?
tail -2 "$E2E_DIR/up-d-doctor.log"
expect "up -d trainer fails" test "$rc" != 0
expect "compose says only that the doctor did not complete" \
  grep -q 'service "doctor" didn.t complete successfully: exit 2' "$E2E_DIR/up-d-doctor.log"
expect "and not the doctor's line" sh -c "! grep -q 'FAIL  data' '$E2E_DIR/up-d-doctor.log'"
dc run --rm status > "$E2E_DIR/status-doctor.log" 2>&1 && rc=0 || rc=$?
grep -E "^(doctor|training)|error" "$E2E_DIR/status-doctor.log" | cut -c1-240
check "run --rm status after the failed doctor (exit 1: something failed)" 1 "$rc"
expect "it names the doctor, its exit code and its FAIL line with the fix" \
  grep -Eq '^doctor failed at .* \(exit 2\): data: /data/empty: .*fix: ' "$E2E_DIR/status-doctor.log"

step "docker compose stop trainer during a run: the step in progress is saved, exit 0"
# 20 steps: room for the status one-off, TensorBoard and the monitor before the stop (~3 s a CPU step)
TRAIN_ARGS="$cpu trainer.total_training_steps=20" dc up -d trainer
for _ in $(seq 600); do
  dc logs trainer 2>/dev/null | grep -q "step:3 " && break
  [ "$(/usr/bin/docker inspect -f '{{.State.Running}}' "$(dc ps -aq trainer)" 2>/dev/null)" = true ] || break
  sleep 1
done
dc logs trainer 2>/dev/null | grep -o "step:3 - " | head -1
# where the run is, from another container, as a user asks it (README, step 5)
dc run --rm status > "$E2E_DIR/status-running.log" 2>&1 && rc=0 || rc=$?
grep -E "^training|error" "$E2E_DIR/status-running.log" | cut -c1-200
check "run --rm status during the run" 0 "$rc"
expect "it says the step of 20, the seconds a step and the time left" \
  grep -Eq '^training: step [0-9]+ of 20, [0-9.]+ s a step, .*~[0-9].* left' "$E2E_DIR/status-running.log"
# TensorBoard and the GPU monitor started and stopped beside the running trainer (they share its logs volume): the
# trainer keeps its container and goes on training
trainer=$(dc ps -q trainer)
dc --profile tensorboard up -d tensorboard && rc=0 || rc=$?
check "TensorBoard started beside the trainer" 0 "$rc"
for _ in $(seq 60); do curl -fsS -o /dev/null http://127.0.0.1:6006/ && break; sleep 1; done
expect "TensorBoard answers on 127.0.0.1:6006 while the trainer trains" curl -fsS -o /dev/null http://127.0.0.1:6006/
dc up -d gpu-monitor >/dev/null 2>&1 || true  # without a driver it exits 3 at once (its own step below)
dc rm -fs gpu-monitor >/dev/null 2>&1 || true
dc --profile tensorboard stop tensorboard && rc=0 || rc=$?
check "TensorBoard stopped beside the trainer" 0 "$rc"
expect "the trainer is the same container, still running" test "$(dc ps -q trainer)" = "$trainer" -a \
  "$(/usr/bin/docker inspect -f '{{.State.Running}}' "$trainer")" = true
dc stop -t 180 trainer && rc=0 || rc=$?
check "stop trainer" 0 "$rc"
code=$(/usr/bin/docker inspect -f '{{.State.ExitCode}}' "$(dc ps -aq trainer)")
check "the trainer container after the stop" 0 "$code"
dc logs trainer 2>/dev/null | grep -E "stop requested|stopped on request" | sed 's/^[^|]*| //'
saved=$(latest_step)
echo "latest checkpoint after the stop: global_step_$saved"
expect "the step in progress was saved (step 4 or later)" test "$saved" -ge 4

step "docker compose up trainer again: it resumes at the next step"
next=$((saved + 1))
TRAIN_ARGS="$cpu trainer.total_training_steps=$next" dc up --exit-code-from trainer trainer > "$E2E_DIR/resume.log" 2>&1 && rc=0 || rc=$?
grep -E "Resuming from|global_step_$saved|step:$next " "$E2E_DIR/resume.log" | sed 's/^[^|]*| //' | cut -c1-160 | head -5
check "up trainer (resume)" 0 "$rc"
expect "resumed with step $next (no step lost, none repeated)" grep -q "step:$next " "$E2E_DIR/resume.log"
expect "the resumed run did not redo step $saved" sh -c "! grep -q 'step:$saved ' '$E2E_DIR/resume.log'"

step "docker compose run --rm eval (the newest checkpoint against the base model, on the CPU)"
dc run --rm eval && rc=0 || rc=$?
check "run --rm eval" 0 "$rc"
in_volume logs ls -ln /v/eval

step "docker compose run --rm export: a host folder that does not exist is refused, not created as root"
dc run --rm export > "$E2E_DIR/export-missing.log" 2>&1 && rc=0 || rc=$?
tail -1 "$E2E_DIR/export-missing.log"
expect "export into a missing host folder fails" test "$rc" != 0
expect "with Docker's 'bind source path does not exist' line" grep -q "bind source path does not exist" "$E2E_DIR/export-missing.log"
expect "and no folder was created" test ! -e "$E2E_DIR/exports"

step "docker compose run --rm export into a fresh host folder made by a uid-1000 user (mkdir -p exports)"
install -d -o 1000 -g 1000 "$E2E_DIR/exports"
dc run --rm export && rc=0 || rc=$?
check "run --rm export" 0 "$rc"
ls -lnR "$E2E_DIR/exports" | head -20

step "docker compose run --rm data-prep as a one-off (the splits are there: it keeps them)"
dc run --rm data-prep && rc=0 || rc=$?
check "run --rm data-prep" 0 "$rc"

step "gpu-monitor without a driver: exits with its line, not restarted"
dc up -d gpu-monitor
sleep 15
cid=$(dc ps -aq gpu-monitor)
/usr/bin/docker logs "$cid" 2>&1 | tail -2
state=$(/usr/bin/docker inspect -f '{{.State.Status}} exit {{.State.ExitCode}} restarts {{.RestartCount}}' "$cid")
echo "gpu-monitor: $state"
expect "gpu-monitor exited 3 and was not restarted" test "$state" = "exited exit 3 restarts 0"

step "without the override: up trainer stops at Docker's GPU line (docs/troubleshooting.md)"
/usr/bin/docker compose -p "$project" -f docker-compose.yml up --no-deps trainer > "$E2E_DIR/nogpu.log" 2>&1 && rc=0 || rc=$?
tail -1 "$E2E_DIR/nogpu.log"
expect "up trainer without the override fails" test "$rc" != 0
expect "with Docker's 'could not select device driver' line" grep -q 'could not select device driver "nvidia"' "$E2E_DIR/nogpu.log"

step "who owns what the services wrote (uid 1000 = the image's user)"
for volume in models data checkpoints logs hf-cache; do
  owners=$(in_volume "$volume" sh -c 'find /v -mindepth 1 -printf "%U\n" | sort | uniq -c | tr -s " " | tr "\n" ";"')
  top=$(in_volume "$volume" stat -c %u /v)
  echo "volume $volume: top folder uid $top; entries by uid: ${owners:-empty}"
  expect "volume $volume owned by uid 1000" sh -c "[ '$top' = 1000 ] && ! echo '$owners' | grep -qv '^ *[0-9]* 1000;\$' "
done
exports_owners=$(find "$E2E_DIR/exports" -printf "%U\n" | sort | uniq -c | tr -s " " | tr "\n" ";")
echo "host folder exports: entries by uid: $exports_owners"
expect "the exports folder and its files owned by uid 1000" sh -c "! echo '$exports_owners' | tr ';' '\n' | grep -v '^\$' | grep -qv ' 1000\$'"

step "clean up"
dc_down

# Another host: the image from a real registry, and from a file. Each on an engine of its own with an empty data root
# (one engine at a time: two on one host fight over docker0), each a short `up trainer` (1 step) to a saved checkpoint.
# REGISTRY=0 leaves this part out.
if [ "${REGISTRY:-1}" != 0 ]; then
  engine_stop() {  # engine_stop PIDFILE: the dockerd this script started, by its pid
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    rm -f "$1"
  }
  clear_dir() {  # clear_dir DIR: removed, after unmounting what a stopped engine may leave mounted at or under it
    # (dockerd bind-mounts its data root onto itself; one killed before it cleans up leaves that mount behind, and
    # rm then fails with "Device or resource busy", on this run or the next one in the same /tmp)
    local dir
    [ -e "$1" ] || return 0
    dir=$(realpath -- "$1")  # findmnt names mounts by their real paths
    findmnt -rn -o TARGET | awk -v d="$dir" '$0 == d || index($0, d "/") == 1' | sort -r |
      while read -r m; do umount -l "$m" || true; done
    rm -rf "$dir"
  }
  engine_start() {  # engine_start NAME: a dockerd on the empty data root $E2E_DIR/NAME-root
    clear_dir "$E2E_DIR/$1-root" && mkdir -p "$E2E_DIR/$1-root" || return 1
    dockerd --data-root "$E2E_DIR/$1-root" --iptables=false --ip-masq=false > "$E2E_DIR/$1.log" 2>&1 &
    echo $! > "$E2E_DIR/$1.pid"
    for _ in $(seq 60); do /usr/bin/docker info >/dev/null 2>&1 && return 0; sleep 1; done
    return 1
  }
  one_step() {  # one_step WHAT: up trainer on this engine's fresh volumes (fetch, prep, doctor, 1 step), no build
    TRAIN_ARGS="$cpu trainer.total_training_steps=1" dc up --no-build --exit-code-from trainer trainer \
      > "$E2E_DIR/$1.log" 2>&1 && rc=0 || rc=$?
    grep -E "Pulling|Pulled|pull access|Building|step:1 " "$E2E_DIR/$1.log" | sed 's/^[^|]*| //' | cut -c1-160 | head -6
    check "up trainer ($1: fetch, prep, doctor, 1 step)" 0 "$rc"
    expect "a checkpoint of step 1 in the new engine's checkpoints volume" test "$(latest_step)" = 1
    dc_down
  }

  # what this part started is stopped by its pid however the script ends
  trap 'for f in registry engine2 engine3; do [ ! -f "$E2E_DIR/$f.pid" ] || kill "$(cat "$E2E_DIR/$f.pid")" 2>/dev/null || true; done' EXIT
  step "a real registry (Distribution, Debian's docker-registry) on the loopback; push the image built above, and
  docker save of the same image into a file (the air-gapped path) at the same time"
  command -v docker-registry >/dev/null || { apt-get update -q && apt-get install -y -q docker-registry >/dev/null; }
  rm -rf "$E2E_DIR/reg-store"
  printf 'version: 0.1\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:5000}\n' \
    "$E2E_DIR/reg-store" > "$E2E_DIR/reg.yml"
  docker-registry serve "$E2E_DIR/reg.yml" > "$E2E_DIR/registry.log" 2>&1 &
  echo $! > "$E2E_DIR/registry.pid"
  for _ in $(seq 30); do curl -fsS http://127.0.0.1:5000/v2/ >/dev/null 2>&1 && break; sleep 1; done
  remote=127.0.0.1:5000/verl-p40
  /usr/bin/docker tag "$image" "$remote:e2e"
  # this part holds the file, the registry's layers and a second engine's copy at once: about three times the image.
  # Short of that, a save or a push fails half-way with a message about a closed pipe or an HTTP 500; say so first.
  need=$(( 3 * $(/usr/bin/docker image inspect -f '{{.Size}}' "$image") ))
  free=$(df --output=avail -B1 "$E2E_DIR" | tail -1)
  expect "free disk for the registry, the file and two engines: $(( free / 1000000000 )) GB on $E2E_DIR's disk, \
$(( need / 1000000000 )) GB needed (free space there, or REGISTRY=0 leaves this part out)" test "$free" -ge "$need"
  rm -f "$E2E_DIR/verl-p40-e2e.tar" "$E2E_DIR/save.rc" "$E2E_DIR/save.end"  # never an earlier run's result
  started=$(date +%s)
  # both only read the image: the save (disk-bound) runs while the push compresses its layers (CPU-bound); the save's
  # exit code is written whatever it is (set -e would end the subshell before it)
  (/usr/bin/docker save -o "$E2E_DIR/verl-p40-e2e.tar" "$image" && rc=0 || rc=$?
   echo "$rc" > "$E2E_DIR/save.rc"; date +%s > "$E2E_DIR/save.end") &
  saving=$!
  /usr/bin/docker push "$remote:e2e" > "$E2E_DIR/push.log" 2>&1 && rc=0 || rc=$?
  tail -1 "$E2E_DIR/push.log"
  check "docker push to the registry ($(( $(date +%s) - started )) s)" 0 "$rc"
  digest=$(/usr/bin/docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$remote:e2e" | grep "^$remote@" | cut -d@ -f2 || true)
  echo "pushed digest: $digest"
  wait "$saving" || true
  check "docker save ($(( $(cat "$E2E_DIR/save.end") - started )) s, $(du -h "$E2E_DIR/verl-p40-e2e.tar" 2>/dev/null | cut -f1))" \
    0 "$(cat "$E2E_DIR/save.rc")"
  engine_stop "$E2E_DIR/dockerd.pid"

  step "a second engine, empty data root: compose pulls the digest-pinned image from the registry, up trainer"
  engine_start engine2 && rc=0 || rc=$?
  check "second engine started" 0 "$rc"
  expect "its data root holds no image" test -z "$(/usr/bin/docker images -q)"
  export VERL_P40_IMAGE=$remote VERL_P40_TAG="e2e@$digest" PULL_POLICY=missing
  in_image="$remote:e2e@$digest"
  started=$(date +%s)
  one_step registry-pull
  echo "pull and run took $(( $(date +%s) - started )) s"
  expect "the image it ran is the pushed digest" sh -c "/usr/bin/docker image inspect -f '{{.RepoDigests}}' '$in_image' | grep -q '$digest'"
  engine_stop "$E2E_DIR/engine2.pid"
  kill "$(cat "$E2E_DIR/registry.pid")" 2>/dev/null || true
  rm -rf "$E2E_DIR/registry.pid" "$E2E_DIR/reg-store"
  clear_dir "$E2E_DIR/engine2-root" && rc=0 || rc=$?
  check "the second engine's data root removed" 0 "$rc"

  step "a third engine, empty data root: docker load of the file, PULL_POLICY=never, up trainer"
  engine_start engine3 && rc=0 || rc=$?
  check "third engine started" 0 "$rc"
  started=$(date +%s)
  /usr/bin/docker load -i "$E2E_DIR/verl-p40-e2e.tar" && rc=0 || rc=$?
  check "docker load ($(( $(date +%s) - started )) s)" 0 "$rc"
  export VERL_P40_IMAGE=verl-p40 VERL_P40_TAG=e2e PULL_POLICY=never
  in_image=$image
  one_step loaded
  engine_stop "$E2E_DIR/engine3.pid"
  rm -f "$E2E_DIR/verl-p40-e2e.tar"
  clear_dir "$E2E_DIR/engine3-root" && rc=0 || rc=$?
  check "the third engine's data root removed" 0 "$rc"
  echo "(the first engine is stopped; docker/e2e/engine.sh starts it again on its data root)"
fi
if [ "$failed" = 0 ]; then echo "e2e: every step PASSED"; else echo "e2e: some steps FAILED (above)"; fi
exit "$failed"
