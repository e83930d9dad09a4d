"""The tensorboard compose service: its entrypoint starts TensorBoard on event files, which serves the run's curves.

The event files are verl's own, written by its TensorBoard logger during the real-weights PPO run on the GPU machine
(bench/results/real-weights-ppo-warmup-2026-11-29, copied to tests/data/tensorboard)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import REPO

EVENTS = REPO / "tests" / "data" / "tensorboard"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def test_the_service_entrypoint_serves_the_runs_scalars_on_localhost(tmp_path):
    logdir = tmp_path / "logs" / "tensorboard"
    shutil.copytree(EVENTS, logdir)
    port = _free_port()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # what compose runs, with the host and port of this test
    server = subprocess.Popen(
        [
            str(REPO / "entrypoints" / "tensorboard.sh"),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, tags = time.time() + 90, {}
        while time.time() < deadline:
            try:
                tags = json.loads(_get(f"http://127.0.0.1:{port}/data/plugin/scalars/tags"))
                if tags.get("."):
                    break
            except OSError:
                pass
            assert server.poll() is None, server.stdout.read()
            time.sleep(1)
        scalars = tags.get(".", {})
        for tag in (
            "critic/score/mean",
            "actor/reward_kl_penalty",
            "actor/pg_loss",
            "critic/vf_loss",
            "response_length/mean",
            "timing_s/step",
        ):
            assert tag in scalars, (tag, sorted(scalars)[:20])
        points = json.loads(_get(f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=.&tag=critic/score/mean"))
        assert len(points) >= 10 and all(len(p) == 3 for p in points)  # (wall time, step, value) per PPO step
    finally:
        server.terminate()
        server.wait(timeout=30)
