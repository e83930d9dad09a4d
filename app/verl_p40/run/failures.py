"""The failures a user of `verl-p40 train` meets, read back from verl's output and said in one actionable line.

verl's workers fail inside Ray, and what reaches the console is a page of nested tracebacks. The trainer's output is
fed through `Diagnosis` line by line; when the trainer exits non-zero, `summary()` is the one line to end with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verl_p40.run import status

# Which verl worker method ran out of memory, and the setting that bounds its memory.
OOM_PHASES = [
    ("update_actor", "the actor's update", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
    ("update_critic", "the critic's update", "critic.ppo_micro_batch_size_per_gpu"),
    (
        "generate_sequences",
        "generation (HF rollout)",
        "actor_rollout_ref.rollout.micro_batch_size (or data.train_batch_size)",
    ),
    (
        "compute_ref_log_prob",
        "the reference model's log-probs",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ),
    ("compute_log_prob", "the actor's log-probs", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
    ("compute_values", "the critic's values", "critic.forward_micro_batch_size_per_gpu"),
]
_OOM = re.compile(r"(OutOfMemoryError|CUDA out of memory)")
_TRIED = re.compile(r"Tried to allocate ([0-9.]+ [GMK]iB)")
_ALLOWED = re.compile(r"([0-9.]+ GiB) allowed")
_WORKER = re.compile(r"WorkerDict\.(\w+)\(\)")
_PARQUET = re.compile(
    r"(Parquet magic bytes not found|Parquet file size is 0 bytes|Could not open Parquet input source"
    r"|ArrowInvalid)"
)
_PATH = re.compile(r"(/[^\s'\":,]+\.parquet)")
# torch.save's zip writer reports a full disk as a write failure or a position mismatch, not as ENOSPC
_NOSPACE = re.compile(
    r"No space left on device|PytorchStreamWriter failed writing file|file write failed"
    r"|inline_container\.cc.*unexpected pos \d+ vs \d+|basic_ios::clear: iostream error"
)
# a worker process gone (SIGKILL, the kernel's OOM killer, Ray's memory monitor): Ray says so in the driver
_WORKER_DIED = re.compile(
    r"ActorDiedError|The actor died unexpectedly|RayActorError|WorkerCrashedError|ray\.exceptions\.OutOfMemoryError"
    r"|Task was killed due to the node running low on memory"
)
_NOSPACE_PATH = re.compile(r"(?:'|\")(/[^'\"]+)(?:'|\")")


@dataclass
class Diagnosis:
    """Feed it the trainer's output lines; `summary()` says what went wrong, or None."""

    oom: bool = False
    oom_phase: str | None = None
    tried: str | None = None
    allowed: str | None = None
    parquet: str | None = None
    parquet_path: str | None = None
    no_space: bool = False
    no_space_path: str | None = None
    worker_died: bool = False
    _workers: list[str] = field(default_factory=list)

    def feed(self, line: str) -> None:
        worker = _WORKER.search(line)
        if worker:
            self._workers.append(worker.group(1))
        if _OOM.search(line):
            self.oom = True
            self.tried = self.tried or (_TRIED.search(line).group(1) if _TRIED.search(line) else None)
            self.allowed = self.allowed or (_ALLOWED.search(line).group(1) if _ALLOWED.search(line) else None)
        if _PARQUET.search(line) and self.parquet is None:
            self.parquet = _PARQUET.search(line).group(1)
        path = _PATH.search(line)
        if path and (self.parquet or "parquet" in line.lower()) and self.parquet_path is None:
            self.parquet_path = path.group(1)
        if _WORKER_DIED.search(line):
            self.worker_died = True
        if _NOSPACE.search(line):
            self.no_space = True
            where = _NOSPACE_PATH.search(line)
            self.no_space_path = self.no_space_path or (where.group(1) if where else None)

    def _phase(self) -> str | None:
        for worker in reversed(self._workers):
            for method, *_ in OOM_PHASES:
                if worker.endswith(method):
                    return method
        return None

    def summary(self) -> str | None:
        if self.oom:
            self.oom_phase = self._phase()
            described, setting = "a training phase", "the micro-batch sizes or data.train_batch_size"
            for method, what, knob in OOM_PHASES:
                if method == self.oom_phase:
                    described, setting = what, knob
            size = (
                f" (tried to allocate {self.tried}" + (f" with {self.allowed} allowed)" if self.allowed else ")")
                if self.tried
                else ""
            )
            return (
                f"CUDA out of memory in {described}{size}: lower {setting}, or give the run a bigger card or "
                "a larger --gpu-memory-cap-gb"
            )
        if self.no_space:
            where = (
                f" writing {self.no_space_path}"
                if self.no_space_path
                else (" writing a checkpoint" if any(w.endswith("save_checkpoint") for w in self._workers) else "")
            )
            return (
                f"disk full{where}: free space under the checkpoint folder, or keep fewer checkpoints "
                "(trainer.max_actor_ckpt_to_keep=1 trainer.max_critic_ckpt_to_keep=1) or save less often "
                f"(trainer.save_freq); {_doctor()} says how much a run needs"
            )
        if self.worker_died:
            return (
                "a Ray worker of the trainer died (killed: on a P40 host usually the kernel's out-of-memory killer, "
                "which `dmesg` or `journalctl -k` names; host memory is the p40 plan's limit): free host memory or "
                f"lower the CPU offload ({_doctor()} says how much a run needs); "
                + status.phrased("`docker compose up -d trainer`", "the same command")
                + " resumes from the newest complete checkpoint"
            )
        if self.parquet:
            where = self.parquet_path or "the data folder"
            again = status.phrased("`docker compose run --rm data-prep`", "`verl-p40 prep`")
            return f"{where}: not a readable parquet file ({self.parquet}): make the data again with {again}"
        return None


def _doctor() -> str:
    """The doctor as the user starts it: the compose one-off (not re-running model-fetch, data-prep) or the CLI."""
    return status.phrased("`docker compose run --rm --no-deps doctor`", "`verl-p40 doctor`")
