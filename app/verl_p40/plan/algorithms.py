"""RL algorithms and LoRA as data: config/algorithms/<name>.yaml and config/lora.yaml, merged over the profile.

A profile is sized in sequences per step (its memory plan holds `data.train_batch_size` x 1 answers). An
algorithm that samples n answers per prompt keeps that number of sequences: it takes train_batch_size / n prompts
a step, and mini-batches of ppo_mini_batch_size / n prompts (verl counts both in prompts and multiplies by n).
Micro-batches are counted in sequences by verl and stay as the profile sized them.

A recipe may set its own `data.train_batch_size` and `actor_rollout_ref.actor.ppo_mini_batch_size`, in prompts
(how many prompts one update sees is a learning choice, not a memory one: micro-batches carry the memory plan).
Those replace the profile's (as n x prompts sequences) before the layout multiplies them by the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from verl_p40 import UserError
from verl_p40.plan.profiles import Settings, config_dir, read
from verl_p40.plan.workload import Workload

DEFAULT = "grpo-gsm8k"


def folder() -> Path:
    return config_dir() / "algorithms"


def available() -> list[str]:
    return sorted(p.stem for p in folder().glob("*.yaml"))


@dataclass(frozen=True)
class Algorithm(Settings):
    @property
    def estimator(self) -> str:
        return Workload.of(self.verl).estimator

    @property
    def samples_per_prompt(self) -> int:
        n = self.verl.get("actor_rollout_ref", {}).get("rollout", {}).get("n", 1)
        return whole(n, f"{self.path}: actor_rollout_ref.rollout.n", "samples per prompt")


def whole(value: Any, where: str, what: str) -> int:
    """`value` when it is a whole number of at least 1 (`what`), else the one line naming `where`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{where} must be a whole number of {what}, got {value!r}")
    return value


def load(name: str) -> Algorithm:
    path = folder() / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"unknown algorithm {name!r}; available: {', '.join(available())}")
    data = read(path)
    return Algorithm(name=name, path=path, description=str(data.get("description", "")), verl=data.get("verl") or {})


def lora(rank: int, alpha: int | None) -> Settings | None:
    """config/lora.yaml with `--lora-rank` and `--lora-alpha` (default 2 x rank) filled in; None for rank 0 (full
    fine-tuning)."""
    if rank <= 0:
        return None
    from omegaconf import OmegaConf

    path = config_dir() / "lora.yaml"
    alpha = int(alpha if alpha is not None else 2 * rank)
    filled = OmegaConf.merge(
        read(path).get("verl") or {}, {"actor_rollout_ref": {"model": {"lora_rank": rank, "lora_alpha": alpha}}}
    )
    return Settings(
        name=f"lora{rank}",
        path=path,
        description=f"LoRA rank {rank}, alpha {alpha}",
        verl=OmegaConf.to_container(filled),
    )


_RECIPE_BATCH = (("data", "train_batch_size"), ("actor_rollout_ref", "actor", "ppo_mini_batch_size"))


def with_batch(profile_verl: dict[str, Any], algorithm: Algorithm, n: int) -> tuple[dict[str, Any], Algorithm]:
    """The profile's settings with the algorithm's batch keys (prompts) in their place as sequences (x n), and the
    algorithm without them; both unchanged when the algorithm sets no batch."""
    import copy

    settings, recipe = copy.deepcopy(profile_verl), copy.deepcopy(algorithm.verl)
    for path in _RECIPE_BATCH:
        parent = recipe
        for key in path[:-1]:
            parent = parent.get(key) or {}
        if path[-1] not in parent:
            continue
        prompts = whole(parent.pop(path[-1]), f"{algorithm.path}: {'.'.join(path)}", "prompts")
        target = settings
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = prompts * n
    return settings, replace(algorithm, verl=recipe)


def without_batch(algorithm: Algorithm) -> Algorithm:
    """The algorithm's own settings without its batch (`with_batch` puts that in the profile's place)."""
    return with_batch({}, algorithm, 1)[1]


def batch_per_prompt(profile_verl: dict[str, Any], n: int, origin: str) -> dict[str, int]:
    """The profile's prompts per step and per mini-batch for n samples per prompt (same sequences per step)."""
    batch = int(profile_verl.get("data", {}).get("train_batch_size", 0) or 0)
    mini = int(profile_verl.get("actor_rollout_ref", {}).get("actor", {}).get("ppo_mini_batch_size", 0) or 0)
    if n == 1 or not batch or not mini:
        return {}
    if batch % n or mini % n:
        divisors = [d for d in range(1, mini + 1) if batch % d == 0 and mini % d == 0]
        raise UserError(
            f"{origin}: {n} samples per prompt do not divide the profile's {batch} sequences a step and "
            f"mini-batches of {mini}; use one of {', '.join(map(str, divisors))}, or set data.train_batch_size and "
            "actor_rollout_ref.actor.ppo_mini_batch_size (in prompts) yourself"
        )
    return {"data.train_batch_size": batch // n, "actor_rollout_ref.actor.ppo_mini_batch_size": mini // n}


def experiment_name(model: str, algorithm: str, lora_rank: int) -> str:
    """<model>-gsm8k-<algorithm>[-lora<R>]: runs that cannot resume each other's checkpoints get their own folder."""
    slug = Path(model).name.lower().removesuffix("-instruct") or "model"
    return f"{slug}-gsm8k-{algorithm}" + (f"-lora{lora_rank}" if lora_rank else "")
