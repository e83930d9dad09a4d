#!/bin/sh
# Test-only (tests/e2e/compose.cpu.yaml): a Ray head with a stand-in GPU resource for verl's resource pool, as
# tests/unit_run/test_trainer_cpu.py starts it, then the product's own trainer entrypoint (exec: `docker compose stop`'s
# SIGTERM reaches verl-p40 itself). Note: `ray stop --force` on the host (the CPU test suite runs it) also
# kills these Ray processes, which the host sees: run this check when no test suite runs beside it.
set -e
python -m ray.scripts.scripts start --head --num-cpus 4 --num-gpus 1 --resources '{"cpu": 4}' \
  --include-dashboard=false --disable-usage-stats --object-store-memory 1000000000 > /tmp/ray-start.log 2>&1 \
  || { cat /tmp/ray-start.log; exit 1; }
export RAY_ADDRESS=auto
exec /opt/verl-p40/entrypoints/trainer.sh "$@"
