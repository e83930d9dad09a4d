"""`verl-p40 cluster`: the same image as a Ray head that trains, or as a host that lends it its GPUs.

- `cluster head --nodes N`: starts Ray's head here with this host's GPUs (`--gpus`), waits until N hosts have joined
  with as many GPUs each, checks that every host sees the model, the data and the same checkpoints folder, then runs
  `verl-p40 train` against the cluster (trainer.nnodes = N) and stops Ray when it ends.
- `cluster join --address HEAD:PORT`: starts Ray on this host with its GPUs and stays in the foreground.

verl's workers on every host load the model and data from the same paths and each writes its own shard of every
checkpoint under the same checkpoints path, so the checkpoints folder must be one shared folder (NFS, ...) mounted at
the same path on every host; the model and data may be copies. The check runs as the doctor's `cluster` check
(`verl_p40.doctor.cluster_check`).
Ports (host networking): RAY_PORT (6379) on the head for Ray's GCS, and on every host the 102 ports after its RAY_PORT
(node manager, object manager, workers).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan import layout as layout_mod


def ray_command() -> list[str]:
    """Ray's command line from the Ray this interpreter imports (the trainer's own), so that no `ray` script on PATH is
    needed and none of another version is picked up (packages installed with `pip --target` come with no script).
    Without Ray the command's one line says so (cli.missing_dependency), before `ray start` ends in a traceback."""
    if importlib.util.find_spec("ray") is None:
        raise ModuleNotFoundError("No module named 'ray'", name="ray")
    return [sys.executable, "-m", "ray.scripts.scripts"]


def ray_start(extra: list[str], gpus: int, ip: str | None, base: int) -> list[str]:
    """`ray start` with fixed ports, so that a firewall can let them through: `base` (the head's GCS), base+1 node
    manager, base+2 object manager, base+3 .. base+102 workers."""
    ports = [
        "--node-manager-port",
        str(base + 1),
        "--object-manager-port",
        str(base + 2),
        "--min-worker-port",
        str(base + 3),
        "--max-worker-port",
        str(base + 102),
    ]
    command = [*ray_command(), "start", *extra, "--num-gpus", str(gpus), "--disable-usage-stats", *ports]
    return command + (["--node-ip-address", ip] if ip else [])


def _layout(options, gpus: tuple[GPUInfo, ...] | None) -> layout_mod.Layout:
    """This host's share of the cluster, from the GPUs the command read (`Facts`), as the plan chooses it."""
    return layout_mod.choose(list(gpus) if gpus is not None else None, options.gpus, options.nodes, options.batch)


def _run(command: list[str], env: dict[str, str]) -> None:
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, env={**os.environ, **env})
    if result.returncode != 0:
        raise UserError(f"ray {command[len(ray_command())]} failed (exit {result.returncode}); see its output above")


def wait_for(address: str, nodes: int, gpus_each: int, timeout_s: float) -> None:
    """Until the cluster has `nodes` hosts and nodes x gpus_each GPUs, saying how many have joined."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        started, last = time.time(), None
        while True:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            have = int(sum(n.get("Resources", {}).get("GPU", 0) for n in alive))
            state = (len(alive), have)
            if state != last:
                print(
                    f"[verl-p40] cluster: {len(alive)} of {nodes} hosts, {have} of {nodes * gpus_each} GPUs", flush=True
                )
                last = state
            if len(alive) >= nodes and have >= nodes * gpus_each:
                return
            if time.time() - started > timeout_s:
                raise UserError(
                    f"only {len(alive)} of {nodes} hosts ({have} GPUs) joined in {timeout_s:.0f} s: start "
                    f"`verl-p40 cluster join --address {address}` (compose: ray-worker with "
                    f"RAY_HEAD={address}) on the others, with port {address.rsplit(':', 1)[-1]} open, or wait "
                    "longer with --wait-s (CLUSTER_WAIT_S)"
                )
            time.sleep(2)
    finally:
        ray.shutdown()


def node_problems(address: str, paths: dict[str, str], marker: str) -> list[str]:
    """On every host of the cluster: which of `paths` it lacks, and whether it sees `marker` (written by the head
    in the checkpoints folder). Returns one line per problem."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def look(named: dict[str, str], shared: str) -> list[str]:
        import socket

        host = socket.gethostname()
        lines = [f"{host}: {what} {path} not found" for what, path in named.items() if not Path(path).exists()]
        if not Path(shared).exists():
            lines.append(
                f"{host}: the checkpoints folder is not the head's ({shared} not seen): mount one shared "
                "folder at the same path on every host"
            )
        return lines

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        task = ray.remote(num_cpus=0)(look)
        refs = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                paths, marker
            )
            for n in ray.nodes()
            if n.get("Alive")
        ]
        return [line for lines in ray.get(refs, timeout=120) for line in lines]
    finally:
        ray.shutdown()


def cmd_head(options, gpus: tuple[GPUInfo, ...] | None, train) -> int:
    """`options`: verl_p40.cli_options.ClusterOptions; `gpus`: this host's (`Facts`); `train` runs the run sequence
    against the cluster."""
    layout = _layout(options, gpus)
    port, ip = str(options.port), options.node_ip or None
    address = f"{ip or '127.0.0.1'}:{port}"
    env = layout_mod.env(layout)  # Ray's workers here see the chosen GPUs only
    _run(ray_start(["--head", "--port", port, "--include-dashboard", "false"], layout.per_node, ip, options.port), env)
    try:
        wait_for(address, options.nodes, layout.per_node, options.wait_s)
        os.environ["RAY_ADDRESS"] = address
        if options.no_train:
            print(f"[verl-p40] cluster ready at {address}; Ctrl-C or SIGTERM stops it", flush=True)
            signal.sigwait({signal.SIGTERM, signal.SIGINT})
            return 0
        return train()
    finally:
        subprocess.run([*ray_command(), "stop"], capture_output=True)


def cmd_join(options, gpus: tuple[GPUInfo, ...] | None) -> int:
    if not options.address:
        raise UserError("--address HEAD:PORT (RAY_HEAD) is needed: where `verl-p40 cluster head` runs")
    host, _, port = options.address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(
            f"--address {options.address} (RAY_HEAD): not HEAD:PORT; give the head's address and its RAY_PORT, "
            "e.g. 10.0.0.1:6379"
        )
    layout = _layout(options, gpus)
    env = layout_mod.env(layout)
    command = ray_start(
        ["--address", options.address, "--block"], layout.per_node, options.node_ip or None, options.port
    )
    print("$ " + " ".join(command), flush=True)
    os.execvpe(command[0], command, {**os.environ, **env})
    return 0  # not reached
