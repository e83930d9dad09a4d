#!/usr/bin/env bash
# Stand-in build of the real Dockerfile on a machine without a Docker engine or registry access (buildah, a
# debootstrap base, PyPI), then checks inside the built image as uid 1000. What it cannot cover is listed at the
# end of its log. Usage (as root, from the repository root):
#   bash docker/standin/build.sh APEX_TARBALL [LOG]          the default image
#   VARIANT=vllm bash docker/standin/build.sh APEX_TARBALL [LOG]   the -vllm variant (no Apex; vLLM 0.8.5)
# APEX_TARBALL: Apex 25.01's source as a .tar.gz (GitHub only serves it: e.g. `git archive` of a fetched copy),
# kept in the ignored folder .standin/. The log goes to LOG (default docker/standin/results/build-<date>.log).
set -euo pipefail
cd "$(dirname "$0")/../.."
apex_tarball=$(realpath "$1")
variant=${VARIANT:-}
log=${2:-docker/standin/results/build${variant:+-$variant}-$(date +%Y-%m-%d).log}
work=$PWD/.standin
mkdir -p "$work" "$(dirname "$log")"
exec > >(tee "$log") 2>&1
step() { printf '\n=== %s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }
store=(--storage-driver overlay --root "$work/storage" --runroot "$work/run")

step "tools"
command -v buildah >/dev/null && command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q buildah debootstrap; }
buildah --version

step "base image: Debian 12 from debootstrap (stands in for docker.io/library/debian:12.8-slim)"
if ! buildah "${store[@]}" inspect localhost/debian-bookworm >/dev/null 2>&1; then
  rm -rf "$work/rootfs" && debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >/dev/null
  mkdir -p "$work/base" && tar -C "$work/rootfs" -cf "$work/base/rootfs.tar" . && rm -rf "$work/rootfs"
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n' > "$work/base/Containerfile"
  buildah "${store[@]}" bud --isolation chroot -t localhost/debian-bookworm "$work/base"
fi

step "Apex source: $(basename "$apex_tarball"), served on 127.0.0.1 (the build argument APEX_URL, as a mirror would)"
# (Written when the apex stage had only Debian 12's CUDA 11.8. Since 0297c29 it takes Debian 13's CUDA 12.4 for a
# cu124 torch, and docker/e2e/build.sh with APEX_TARBALL builds the real stage, checks on, on a Docker engine; this
# script, not run since, still disables the checks below, which that toolkit makes unnecessary.)
# Stand-in only: PyPI's torch 2.6.0 is the +cu124 build, while the toolkit is Debian's CUDA 11.8. Apex's setup.py
# refuses a toolkit whose version differs from torch.version.cuda, and torch's cpp_extension refuses another major
# version. The real image pairs torch 2.6.0+cu118 with that same nvcc 11.8, so both checks pass there; here the
# served copy of setup.py disables both (the compile itself is the real one: nvcc 11.8 against torch 2.6's headers).
rm -rf "$work/serve" && mkdir -p "$work/serve/src"
tar -xzf "$apex_tarball" -C "$work/serve/src" --strip-components=1
grep -n "if (bare_metal_version != torch_binary_version):" "$work/serve/src/setup.py"
sed -i 's/    if (bare_metal_version != torch_binary_version):/    if False:  # verl-p40 stand-in: cu124 torch headers with nvcc 11.8/' "$work/serve/src/setup.py"
grep -n "^import torch$" "$work/serve/src/setup.py"
sed -i 's/^import torch$/import torch\nimport torch.utils.cpp_extension as _ext; _ext._check_cuda_version = lambda *a: None  # verl-p40 stand-in/' "$work/serve/src/setup.py"
grep -n "verl-p40 stand-in" "$work/serve/src/setup.py"
tar -czf "$work/serve/apex.tar.gz" -C "$work/serve" src && rm -rf "$work/serve/src"
python3 -m http.server 18765 --bind 127.0.0.1 --directory "$work/serve" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT

step "CA bundle: this machine's (its outbound TLS is inspected) into docker/certs/ (ignored by git)"
cp /etc/ssl/certs/ca-certificates.crt docker/certs/standin-host-ca.crt

step "build (the real Dockerfile; stand-in build arguments only)"
args=(
  --build-arg BASE_IMAGE=localhost/debian-bookworm
  --build-arg TORCH_INDEX_URL=https://pypi.org/simple   # the PyTorch index is unreachable here
  --build-arg TORCH_VERSION=2.6.0                       # PyPI's build of torch 2.6.0 (+cu124)
  --build-arg APEX_URL=http://127.0.0.1:18765/apex.tar.gz
  --build-arg TORCH_CUDA_ARCH_LIST="6.0;6.1"            # Pascal only: the full list takes hours on 2 cores
  --build-arg MAX_JOBS=2
  --build-arg BUILD_CHECK_SKIP=apex                     # cu124 torch cannot load an extension built for CUDA 11.8
)
tag=localhost/verl-p40:standin
if [ "$variant" = vllm ]; then  # the variant's real build arguments (its torch is PyPI's: no stand-in needed there)
  args=(--build-arg BASE_IMAGE=localhost/debian-bookworm --build-arg TORCH_INDEX_URL=https://pypi.org/simple
        --build-arg TORCH_VERSION=2.6.0 --build-arg LOCK=requirements-vllm.txt --build-arg APEX_STAGE=no-apex
        --build-arg BUILD_CHECKS=torch-build,verl,vllm)
  tag=localhost/verl-p40:standin-vllm
fi
started=$(date +%s)
# buildah (unlike BuildKit) does not build a stage that is named only through a build argument (FROM ${APEX_STAGE}):
# build the apex stage first under its own name, which that FROM then finds
[ "$variant" = vllm ] || buildah "${store[@]}" bud --isolation chroot --layers --format docker "${args[@]}" \
  --target apex -t localhost/apex .
buildah "${store[@]}" bud --isolation chroot --layers --format docker "${args[@]}" -t "$tag" .
echo "build took $(( $(date +%s) - started )) s"
buildah "${store[@]}" images "$tag"

step "checks inside the image, as uid 1000"
c=$(buildah "${store[@]}" from "$tag")
trap 'kill $server 2>/dev/null || true; buildah "${store[@]}" rm "$c" >/dev/null 2>&1 || true' EXIT
inside() { echo "\$ $*"; buildah "${store[@]}" run --isolation chroot --user 1000:1000 "$c" -- "$@"; }
as_root() { buildah "${store[@]}" run --isolation chroot "$c" -- "$@"; }
inside id
inside verl-p40 --help
inside verl-p40 patch-verl --check
inside verl-p40 doctor --only torch-build,verl
echo "--- ownership of every folder compose mounts a volume on (expect 1000:1000)"
inside stat -c '%u:%g %n' /models /data /checkpoints /logs /home/verl/.cache/huggingface
echo "--- prep of the real GSM8K into a fresh data folder, HF_HOME at the image's cache path"
buildah "${store[@]}" copy --chown 0:0 "$c" tests/fixtures/gsm8k /tmp/gsm8k-source
inside bash -c 'echo "HF_HOME=$HF_HOME"; verl-p40 prep --source /tmp/gsm8k-source --out /data/gsm8k && ls -la /data/gsm8k'
if [ ! -f "$work/tiny-qwen/config.json" ]; then  # made with the test stack (bash tests/run.sh sets up .venv)
  PYTHONPATH=tests .venv/bin/python -c "from conftest import make_tiny_qwen, FIXTURES; from pathlib import Path; \
make_tiny_qwen(FIXTURES / 'qwen2.5-0.5b-instruct', Path('$work/tiny-qwen'))"
fi
echo "--- doctor without a GPU (a tiny Qwen2 with the real tokenizer stands in for the model; expect the GPU checks to fail)"
buildah "${store[@]}" copy --chown 1000:1000 "$c" "$work/tiny-qwen" /models/tiny-qwen
set +e
inside verl-p40 doctor --profile p40 --model /models/tiny-qwen --data /data/gsm8k
echo "doctor exit code: $?"
set -e
echo "--- the services added since: tensorboard starts; export and the air-gapped model copy run on the tiny model"
inside /opt/verl-p40/entrypoints/tensorboard.sh --version_tb
# /models is a VOLUME: what buildah copies there is hidden by the volume `buildah run` mounts, so /tmp it is
buildah "${store[@]}" copy --chown 1000:1000 "$c" "$work/tiny-qwen" /tmp/tiny-qwen
inside bash -c 'HF_HUB_OFFLINE=1 /opt/verl-p40/entrypoints/export.sh --model /tmp/tiny-qwen --out /tmp/exports \
  --gguf q8_0 && ls /tmp/exports'
inside bash -c 'HF_HUB_OFFLINE=1 VERL_P40_MODEL_FROM=/tmp/tiny-qwen VERL_P40_MODEL=/tmp/models/m \
  /opt/verl-p40/entrypoints/model-fetch.sh'
echo "--- the cluster services: Ray's command line as verl-p40 cluster runs it, and ray-worker without RAY_HEAD says what it needs"
inside python -c 'import subprocess; from verl_p40.run.cluster import ray_command; subprocess.run([*ray_command(), "--version"], check=True)'
inside bash -c '/opt/verl-p40/entrypoints/ray-worker.sh; echo "ray-worker exit code: $?"'
if [ "$variant" = vllm ]; then
  inside bash -c 'pip check; python -c "import vllm, verl.workers.rollout.vllm_rollout; print(\"vllm\", vllm.__version__, \"and verl.workers.rollout.vllm_rollout import\")"'
  inside bash -c 'pip list 2>/dev/null | grep -i -E "^(torch|vllm|xformers|verl|verl-p40|transformers|ray) "'
  printf '\n=== not covered by this stand-in\n- the real base image (a debootstrap of the same Debian 12 here)\n'
  printf -- '- a GPU: vLLM never ran here (it cannot reach the GPU machine); a Docker engine\n'
  exit 0
fi
echo "--- Apex's extensions: import with CUDA 11.8's runtime beside the cu124 torch (the real image's torch brings it)"
buildah "${store[@]}" copy "$c" "$work/wheels/" /tmp/cu11-wheels/
as_root bash -c 'cd /tmp && python -m zipfile -e /tmp/cu11-wheels/nvidia_cuda_runtime_cu11-*.whl /tmp/cu11'
inside bash -c 'LD_LIBRARY_PATH=/tmp/cu11/nvidia/cuda_runtime/lib python -c "
import torch, apex, amp_C, apex_C, fused_layer_norm_cuda, mlp_cuda, syncbn
print(\"torch\", torch.__version__, \"- apex extensions import:\", amp_C.__file__)"'
inside bash -c 'ls /opt/venv/lib/python3.11/site-packages/ | grep -E "^(apex|amp_C|fused_|mlp_cuda|syncbn|scaled_|fused_weight)" | sort'
inside bash -c 'pip list 2>/dev/null | grep -i -E "^(torch|verl|verl-p40|apex|transformers|ray) "'

cat <<'NOTE'

=== not covered by this stand-in
- the real base image (docker.io/library/debian:12.8-slim; here a debootstrap of the same Debian 12) and the real
  torch build (2.6.0+cu118 from the PyTorch index; here PyPI's 2.6.0+cu124, same headers and kernel list)
- Apex's version check against torch (disabled in the served copy: cu124 torch, nvcc 11.8) and its import in the
  build (skipped by name: BUILD_CHECK_SKIP=apex); the import is shown above with CUDA 11.8's runtime beside it
- Apex for sm_70..sm_90 (the default TORCH_CUDA_ARCH_LIST; built here for sm_60 and sm_61 only)
- a GPU (no checks that need one), a Docker engine (named-volume ownership at run time, GPU reservations, compose)
NOTE
