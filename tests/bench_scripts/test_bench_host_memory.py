"""The host-memory terms (bench/host_memory.py) from the committed resident-memory log of timing-pair-2026-12-06, and
plan/budget.py's constants taken from them."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import host_memory  # noqa: E402
from verl_p40.plan import budget  # noqa: E402

RUN = REPO / "bench" / "results" / "timing-pair-2026-12-06"


def _result(name: str) -> dict:
    return json.loads((RUN / f"{name}.json").read_text(encoding="utf-8"))


def test_the_committed_terms_are_what_the_committed_log_gives():
    committed = json.loads((RUN / "host-memory.json").read_text(encoding="utf-8"))
    log = host_memory.samples((RUN / "rss.log").read_text(encoding="utf-8"))
    runs = [host_memory.terms(log, _result(n), f"timing-pair-2026-12-06/{n}.json") for n in ("before", "both")]
    assert committed["runs"] == runs
    before = runs[0]
    assert round(before["worker_peak_bytes"] / 2**30, 2) == 7.62  # the worker's peak, as the run's README says
    # the P40 plan kept the actor's Adam states on the GPU and the reference weights in host memory (GRPO: no critic)
    assert before["offloaded_bytes"] == {"reference_params": 4 * 494032768}
    assert before["per_gpu_worker_bytes"] == before["worker_peak_bytes"] - 4 * 494032768
    assert committed["fixed_bytes"] == max(r["fixed_bytes"] for r in runs)


def test_the_budget_takes_the_measured_terms_rounded_up():
    committed = json.loads((RUN / "host-memory.json").read_text(encoding="utf-8"))
    assert budget.HOST_FIXED_BYTES == committed["budget_gb"]["fixed"] * 1e9 >= committed["fixed_bytes"]
    assert budget.HOST_PER_GPU_WORKER_BYTES == committed["budget_gb"]["per_gpu_worker"] * 1e9
    assert budget.HOST_PER_GPU_WORKER_BYTES >= committed["per_gpu_worker_bytes"]


def test_offloaded_state_is_what_the_plan_left_off_the_gpu():
    result = {
        "settings": {"model_parameters": 10},
        "phases_s": {"ref": 1.0, "values": 1.0},
        "predicted": {"sizes": {"on_gpu": ["critic_params"]}},
    }
    assert host_memory.offloaded(result) == {"actor_optimizer": 80, "reference_params": 40, "critic_optimizer": 80}


def test_a_bench_takes_the_samples_of_its_own_cli():
    log = host_memory.samples(
        "at 2026-12-06T05:00:00Z\n  PID   RSS COMMAND\n  1 100 python3 -m verl_p40.cli bench\n"
        "  2 300 ray::WorkerDict.actor_rollout_generate_sequences\n  3 50 ray::TaskRunner.run\n"
        "at 2026-12-06T05:00:05Z\n  PID   RSS COMMAND\n  9 999 python3 -m verl_p40.cli bench\n"
    )
    result = {"date": "2026-12-06 05:00:02", "wall_s": 2, "environment": {"gpus": ["GPU 0"]}}
    result |= {"settings": {"model_parameters": 1}, "phases_s": {}, "predicted": {"sizes": {"on_gpu": []}}}
    terms = host_memory.terms(log, result, "x")
    assert terms["samples"] == 1 and terms["worker_peak_bytes"] == 300 * 1024
    assert terms["fixed_bytes"] == 150 * 1024  # the CLI and the TaskRunner, not the next bench's CLI
    assert terms["per_gpu_worker_bytes"] == 300 * 1024 - 8  # less the actor's Adam states, offloaded
