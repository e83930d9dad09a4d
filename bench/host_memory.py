"""The host-memory terms of a run (issue 68), from every process's resident memory during `verl-p40 bench` on one GPU:
a fixed part (the verl-p40 CLI, verl's driver, Ray's TaskRunner and its own processes) and a part for each GPU worker
(Ray's WorkerDict: actor, rollout and reference in one process a GPU), less the offloaded state the plan already
counts (plan/budget.py: fixed + worker x GPUs + the offloaded state, which FSDP shards over the cards).

    R=bench/results/timing-pair-2026-12-06; PYTHONPATH=bench:app python3 bench/host_memory.py --rss $R/rss.log \
        --out $R/host-memory.json $R/before.json $R/both.json

CPU only. `--rss`: `ps -eo pid,rss,args --sort=-rss | head -12` every 5 s, each block after an `at <UTC time>` line
(RSS in KiB); only the 11 largest processes of each sample are there, so the fixed part is a lower bound by the
processes under the 11th (each under ~0.1 GB in the committed log). Each bench JSON picks its own samples: those in
which the `verl-p40` CLI that ran at the middle of its timed steps (`date` - `wall_s` / 2) is alive. Resident memory
counts pages that forked processes share in each of them (the driver's dataloader workers carry its name).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from verl_p40.plan.budget import ADAM_STATES, FP32

RESULTS = Path(__file__).resolve().parent / "results"
WORKER = "ray::WorkerDict"  # Ray names a worker's process after the method it runs: ray::WorkerDict.<method>
CLI = "-m verl_p40.cli"


@dataclass(frozen=True)
class Sample:
    at: datetime
    processes: tuple[tuple[int, int, str], ...]  # (pid, resident bytes, command)


def samples(text: str) -> list[Sample]:
    out: list[tuple[datetime, list]] = []
    for line in text.splitlines():
        if line.startswith("at "):
            out.append((datetime.strptime(line[3:].strip(), "%Y-%m-%dT%H:%M:%SZ"), []))
        elif out and (m := re.match(r"\s*(\d+)\s+(\d+)\s+(.*)", line)):
            out[-1][1].append((int(m[1]), int(m[2]) * 1024, m[3]))
    return [Sample(at, tuple(ps)) for at, ps in out]


def window(all_samples: list[Sample], result: dict) -> list[Sample]:
    """The samples of one bench: those in which the CLI alive at the middle of its timed steps is."""
    middle = datetime.strptime(result["date"], "%Y-%m-%d %H:%M:%S") - timedelta(seconds=result["wall_s"] / 2)
    near = min(all_samples, key=lambda s: abs((s.at - middle).total_seconds()))
    (cli,) = [pid for pid, _, cmd in near.processes if CLI in cmd]
    return [s for s in all_samples if any(pid == cli for pid, _, _ in s.processes)]


def offloaded(result: dict) -> dict[str, int]:
    """The states the bench's memory plan kept in host memory, in bytes: those of the run (the reference where a
    reference pass ran, the critic's where a values pass ran; the actor's Adam states always, no LoRA in a bench)
    that are not `predicted.sizes.on_gpu`."""
    parameters = int(result["settings"]["model_parameters"])
    phases = result["phases_s"]
    sizes = {"actor_optimizer": FP32 * ADAM_STATES * parameters}
    if "ref" in phases:
        sizes["reference_params"] = FP32 * parameters
    if "values" in phases:
        sizes |= {"critic_params": FP32 * parameters, "critic_optimizer": FP32 * ADAM_STATES * parameters}
    on_gpu = set(result["predicted"]["sizes"]["on_gpu"])
    return {state: n for state, n in sizes.items() if state not in on_gpu}


def terms(all_samples: list[Sample], result: dict, name: str) -> dict:
    ours = window(all_samples, result)
    worker = max(rss for s in ours for _, rss, cmd in s.processes if cmd.startswith(WORKER))
    workers = {len({pid for pid, _, cmd in s.processes if cmd.startswith(WORKER)}) for s in ours}
    gpus = len(result["environment"]["gpus"])
    assert workers <= {0, gpus}, (name, workers, gpus)  # one worker a GPU
    rest = max(sum(rss for _, rss, cmd in s.processes if not cmd.startswith(WORKER)) for s in ours)
    state = offloaded(result)
    return {
        "result": name,
        "gpus": gpus,
        "samples": len(ours),
        "from": ours[0].at.strftime("%H:%M:%S"),
        "to": ours[-1].at.strftime("%H:%M:%S"),
        "worker_peak_bytes": worker,
        "offloaded_bytes": state,
        "per_gpu_worker_bytes": worker - sum(state.values()) // gpus,  # a GPU's shard of the offloaded state
        "fixed_bytes": rest,
        "total_peak_bytes": max(sum(rss for _, rss, _ in s.processes) for s in ours),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path, help="`verl-p40 bench` JSON files of the benches in the log")
    parser.add_argument("--rss", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    log = samples(args.rss.read_text(encoding="utf-8"))
    runs = [terms(log, json.loads(p.read_text(encoding="utf-8")), _named(p)) for p in args.results]
    fixed, worker = max(r["fixed_bytes"] for r in runs), max(r["per_gpu_worker_bytes"] for r in runs)
    out = {
        "what": "host memory of a run: a fixed part and a part for each GPU worker, less the offloaded state",
        "command": " ".join(["PYTHONPATH=bench:app python3 bench/host_memory.py", *sys.argv[1:]]),
        "fixed_bytes": fixed,
        "per_gpu_worker_bytes": worker,
        # what plan/budget.py takes: each rounded up to 0.1 GB
        "budget_gb": {"fixed": math.ceil(fixed / 1e8) / 10, "per_gpu_worker": math.ceil(worker / 1e8) / 10},
        "note": "measured on one GPU; times the card count, an estimate for 2-4 cards (no run with more than one)",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".tmp")
    partial.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    partial.replace(args.out)
    for r in runs:
        print(
            f"{r['result']}: worker peak {r['worker_peak_bytes'] / 1e9:.2f} GB - offloaded "
            f"{sum(r['offloaded_bytes'].values()) / 1e9:.2f} GB = {r['per_gpu_worker_bytes'] / 1e9:.2f} GB a GPU "
            f"worker; the rest {r['fixed_bytes'] / 1e9:.2f} GB",
            file=sys.stderr,
        )


def _named(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RESULTS))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    main()
