#!/usr/bin/env bash
# Build the real Dockerfile with a real Docker engine (BuildKit) on a machine that reaches PyPI and Debian only:
# build arguments stand in for what cannot be reached here, nothing else changes. Apex is left out (APEX_STAGE=
# no-apex: GitHub serves its source, and its sm_60/61 compile takes ~2 h on 2 cores; docker/standin/ keeps that build
# checked). PyPI's torch 2.6.0 (+cu124) stands in for the cu118 wheel of the PyTorch index. Usage (as root, after
# docker/e2e/engine.sh): bash docker/e2e/build.sh [TAG]   (default verl-p40:e2e)
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-verl-p40:e2e}
cp /etc/ssl/certs/ca-certificates.crt docker/certs/e2e-host-ca.crt   # this machine's outbound TLS is inspected
trap 'rm -f docker/certs/e2e-host-ca.crt' EXIT
started=$(date +%s)
DOCKER_BUILDKIT=1 /usr/bin/docker build --network host --progress plain \
  --build-arg TORCH_INDEX_URL=https://pypi.org/simple --build-arg TORCH_VERSION=2.6.0 \
  --build-arg APEX_STAGE=no-apex --build-arg BUILD_CHECKS=torch-build,verl \
  -t "$tag" .
echo "build took $(( $(date +%s) - started )) s"
/usr/bin/docker image ls "$tag" --format 'image {{.Repository}}:{{.Tag}} {{.Size}}'
/usr/bin/docker image inspect "$tag" --format 'image bytes {{.Size}}'
