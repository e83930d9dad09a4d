"""`verl-p40 doctor`: the preflight. One line per check, PASS / FAIL (with the fix) / SKIP (with the reason).

A P40 owner runs it first; `verl-p40 train` runs it before Ray starts; compose runs it as the one-off the trainer
waits for, so a deterministic failure (no driver, a card this torch cannot run, a missing model, a full disk)
stops once, with its line, instead of failing minutes later inside a Ray worker. Any check can be skipped by name
(`--skip-check NAME` or `VERL_P40_DOCTOR_SKIP=NAME,...`), and then says so.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from verl_p40 import VERL_VERSION, UserError, defaults
from verl_p40.doctor.cluster_check import check_cluster
from verl_p40.doctor.context import CheckFailed, CheckSkipped, Context, check_plan
from verl_p40.doctor.host_checks import check_data, check_disk, check_model, check_ram, check_shm, check_writable
from verl_p40.doctor.stack_checks import (
    check_apex,
    check_compute,
    check_gpu,
    check_kernels,
    check_torch_build,
    check_verl,
    check_vllm,
)
from verl_p40.plan.facts import Facts
from verl_p40.plan.planner import RunPlan
from verl_p40.plan.run_options import RunOptions

__all__ = ["Context", "Result", "run_checks", "report", "preflight", "skips", "parse_names", "names_help", "DEFAULT"]

SKIP_ENV = defaults.DOCTOR_SKIP.env
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Result:
    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status}  {self.name:<11} {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix else text


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Context], str]
    about: str


CHECKS = [
    Check("gpu", check_gpu, "NVIDIA driver and GPUs through NVML; the driver's CUDA against torch's"),
    Check("kernels", check_kernels, "each GPU's compute capability against the torch build's kernel list"),
    Check("compute", check_compute, "fp32 matmul and SDPA forward/backward on every GPU against the CPU"),
    Check("verl", check_verl, f"verl {VERL_VERSION} installed and the verl-p40 patch set applied"),
    Check("plan", check_plan, "the run planned as `verl-p40 train` will plan it (GPUs, batch, memory, verl's config)"),
    Check("model", check_model, "the model folder is complete (config, tokenizer, weights)"),
    Check("data", check_data, "train/test parquet in verl's RL schema"),
    Check("writable", check_writable, "checkpoints, logs and the Hugging Face cache are writable"),
    Check("disk", check_disk, "free disk for the checkpoints the run keeps"),
    Check("shm", check_shm, "/dev/shm for Ray's object store and NCCL"),
    Check("ram", check_ram, "host memory for Ray, its GPU workers and offloaded state"),
    Check(
        "cluster",
        check_cluster,
        "with --nodes above 1: every host joined, sees the model and data, shares the checkpoints folder",
    ),
    Check("torch-build", check_torch_build, "the torch build has sm_60 kernels (image build check)"),
    Check("apex", check_apex, "Apex imports, and its CUDA extensions where the image built them (image build check)"),
    Check("vllm", check_vllm, "vLLM and verl's vLLM rollout import (build check of the -vllm variant)"),
]
BY_NAME = {c.name: c for c in CHECKS}
BUILD_ONLY = ("torch-build", "apex", "vllm")
DEFAULT = [c.name for c in CHECKS if c.name not in BUILD_ONLY]


def parse_names(text: str | None, origin: str) -> list[str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UserError(f"{origin}: unknown check {', '.join(map(repr, unknown))}; checks: {', '.join(BY_NAME)}")
    return names


def run_checks(ctx: Context, only: list[str] | None = None, skip: dict[str, str] | None = None) -> list[Result]:
    """Run the named checks (default: all but the build checks); `skip` maps names to the reason they are skipped."""
    skip = skip or {}
    results = []
    for name in only or DEFAULT:
        if name in skip:
            results.append(Result(name, SKIP, f"skipped by {skip[name]}"))
            continue
        try:
            results.append(Result(name, PASS, BY_NAME[name].run(ctx)))
        except CheckFailed as exc:
            results.append(Result(name, FAIL, exc.detail, exc.fix))
        except CheckSkipped as exc:
            results.append(Result(name, SKIP, str(exc)))
    return results


def skips(from_flags: list[str] | None) -> dict[str, str]:
    out = {n: f"--skip-check {n}" for n in parse_names(",".join(from_flags or []), "--skip-check")}
    for name in parse_names(defaults.DOCTOR_SKIP.get(), SKIP_ENV):
        out.setdefault(name, f"{SKIP_ENV}={defaults.DOCTOR_SKIP.get()}")
    return out


def report(results: list[Result], as_json: bool = False) -> str:
    if as_json:
        return json.dumps([asdict(r) for r in results], indent=2)
    failed = sum(r.status == FAIL for r in results)
    summary = (
        f"doctor: {failed} of {len(results)} checks failed"
        if failed
        else f"doctor: all {len(results)} checks passed"
        + (" or skipped" if any(r.status == SKIP for r in results) else "")
    )
    return "\n".join([r.line() for r in results] + [summary])


@functools.cache
def names_help() -> str:
    return "; ".join(f"{c.name}: {c.about}" for c in CHECKS)


def preflight(run: RunPlan, facts: Facts, options: RunOptions, skip: dict[str, str], quiet: bool = False) -> None:
    """`verl-p40 doctor` before Ray starts, on the plan the run was given and the machine it was planned for: what
    must be true before spending a minute on Ray start-up."""
    results = run_checks(Context(options, run, facts), skip=skip)
    if not quiet:
        print(report(results), file=sys.stderr, flush=True)
    failed = [r for r in results if r.status == FAIL]
    if failed:
        if quiet:  # nothing was printed: every failure goes into the one line
            raise UserError("preflight: " + " | ".join(_described(r) for r in failed))
        raise UserError(f"preflight: {failure_line(results)}")


def _described(result: Result) -> str:
    return f"{result.name}: {result.detail}" + (f"; fix: {result.fix}" if result.fix else "")


def failure_line(results: list[Result]) -> str | None:
    """The first failed check with its fix, and how many more failed; None when none did."""
    failed = [r for r in results if r.status == FAIL]
    if not failed:
        return None
    more = f" (and {len(failed) - 1} more failed checks above)" if len(failed) > 1 else ""
    return _described(failed[0]) + more
