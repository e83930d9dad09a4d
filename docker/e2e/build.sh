#!/usr/bin/env bash
# Build the real Dockerfile with a real Docker engine (BuildKit) on a machine that reaches PyPI and Debian only:
# build arguments stand in for what cannot be reached here, nothing else changes. PyPI's torch 2.6.0 (+cu124) stands
# in for the cu118 wheel of the PyTorch index. Apex is left out (APEX_STAGE=no-apex: GitHub serves its source),
# unless APEX_TARBALL names Apex 25.01's source as a .tar.gz: then it is served on 127.0.0.1 as APEX_URL, the way
# docs/image.md tells air-gapped hosts to, and the default apex stage and build checks run (Apex's Python package;
# with APEX_CUDA_EXT=1 its CUDA extensions too, compiled by the Debian 13 CUDA 12.4 toolkit that matches this torch).
# EMPTY_CACHE=1 first drops the engine's build cache (a first build, as a fresh host's first `up` runs it).
# Usage (as root, after docker/e2e/engine.sh):
#   [APEX_TARBALL=apex-25.01.tar.gz [APEX_CUDA_EXT=1]] [EMPTY_CACHE=1] bash docker/e2e/build.sh [TAG]   (default verl-p40:e2e)
set -euo pipefail
[ -z "${APEX_TARBALL:-}" ] || APEX_TARBALL=$(realpath -- "$APEX_TARBALL")
cd "$(dirname "$0")/../.."
tag=${1:-verl-p40:e2e}
cp /etc/ssl/certs/ca-certificates.crt docker/certs/e2e-host-ca.crt   # this machine's outbound TLS is inspected
cleanup() {
  rm -f docker/certs/e2e-host-ca.crt
  [ -z "${server:-}" ] || kill "$server" 2>/dev/null || true
  [ -z "${serve:-}" ] || rm -rf "$serve"
}
trap cleanup EXIT
args=(--build-arg TORCH_INDEX_URL=https://pypi.org/simple --build-arg TORCH_VERSION=2.6.0)
if [ -n "${APEX_TARBALL:-}" ]; then
  serve=$(mktemp -d)
  cp "$APEX_TARBALL" "$serve/apex.tar.gz"
  python3 -m http.server 18766 --bind 127.0.0.1 --directory "$serve" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 20); do curl -fsI http://127.0.0.1:18766/apex.tar.gz >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fsI http://127.0.0.1:18766/apex.tar.gz >/dev/null || { echo "build.sh: the Apex source server on 127.0.0.1:18766 did not answer" >&2; exit 1; }
  echo "Apex: $(basename "$APEX_TARBALL") ($(sha256sum "$APEX_TARBALL" | cut -c1-16)...) served as APEX_URL"
  args+=(--build-arg APEX_URL=http://127.0.0.1:18766/apex.tar.gz --build-arg "APEX_CUDA_EXT=${APEX_CUDA_EXT:-0}")
else
  args+=(--build-arg APEX_STAGE=no-apex --build-arg BUILD_CHECKS=torch-build,verl)
fi
if [ "${EMPTY_CACHE:-0}" = 1 ]; then
  /usr/bin/docker builder prune -af | tail -1
fi
echo "build arguments: ${args[*]}"
echo "host: $(nproc) cores; load before the build: $(cut -d' ' -f1-3 /proc/loadavg)"
started=$(date +%s)
DOCKER_BUILDKIT=1 /usr/bin/docker build --network host --progress plain "${args[@]}" -t "$tag" .
echo "build took $(( $(date +%s) - started )) s (load after the build: $(cut -d' ' -f1-3 /proc/loadavg))"
/usr/bin/docker image ls "$tag" --format 'image {{.Repository}}:{{.Tag}} {{.Size}}'
/usr/bin/docker image inspect "$tag" --format 'image bytes {{.Size}}'
