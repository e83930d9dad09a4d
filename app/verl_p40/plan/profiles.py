"""Hardware profiles: YAML data in config/profiles/, chosen by name or from what NVML reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from verl_p40 import UserError, defaults
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.options import FOLDER, path_problem

BASE = "base"


def profiles_dir() -> Path:
    """`$VERL_P40_PROFILES_DIR`, else the profiles shipped with the package (config/profiles in the repo). The variable
    must name a folder with profile files in it."""
    override = defaults.PROFILES_DIR.get()
    if not override:
        return Path(str(resources.files("verl_p40.configs"))) / "profiles"
    folder = Path(override).expanduser()
    problem = path_problem(override, FOLDER, exists=True)
    if not problem and not any(folder.glob("*.yaml")):
        problem = "no profile files (NAME.yaml) in it"
    if problem:
        raise UserError(
            f"${defaults.PROFILES_DIR.env} {override}: {problem}; point it at a folder of profile YAML files "
            "(as config/profiles), or unset it for the shipped ones"
        )
    return folder


def config_dir() -> Path:
    """The folder holding algorithms/ and lora.yaml: beside `$VERL_P40_PROFILES_DIR` when that folder's parent has
    them (a checkout's config/), else the ones shipped with the package."""
    beside = profiles_dir().parent
    if (beside / "algorithms").is_dir():
        return beside
    return Path(str(resources.files("verl_p40.configs")))


@dataclass(frozen=True)
class Settings:
    """A named settings file: its description and the nested verl config values it sets."""

    name: str
    path: Path
    description: str
    verl: dict[str, Any]


@dataclass(frozen=True)
class Profile(Settings):
    """A hardware profile; `verl` has base.yaml and every profile it extends merged under its own values."""

    match: dict[str, float] = field(default_factory=dict)
    # what the profile was measured at on one GPU (its own file only): worker_peak_gb (NVML), card_gb, and
    # model_parameters; layout.unoffload reads it to keep sharded states on the GPU when a run has several
    measured: dict[str, float] = field(default_factory=dict)

    def fits(self, gpu: GPUInfo) -> bool:
        lo = self.match.get("min_compute_capability", 0.0)
        hi = self.match.get("max_compute_capability", 99.0)
        return lo <= gpu.sm <= hi


def read(path: Path) -> dict:
    """A settings file (profile, algorithm, LoRA): a YAML mapping whose `verl` mapping holds verl config values."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("verl", {}), dict):
        raise UserError(f"{path}: a settings file is a mapping with a 'verl' mapping of verl config values")
    return data


def available() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml") if p.stem != BASE and read(p).get("selectable", True))


def known(name: str, folder: Path | None = None) -> bool:
    return name != BASE and ((folder or profiles_dir()) / f"{name}.yaml").is_file()


def _unknown(name: str, origin: str) -> UserError:
    return UserError(f"{origin}: unknown profile {name!r}; available: {', '.join(available())} or auto")


def check_name(name: str, origin: str = "--profile") -> None:
    """`--profile`'s check: auto, or a profile in the profiles folder."""
    if name != "auto" and not known(name):
        raise _unknown(name, origin)


def _chain(name: str, folder: Path, seen: tuple[str, ...] = ()) -> list[dict]:
    """The profile's YAML and those it extends, base first."""
    path = folder / f"{name}.yaml"
    if not known(name, folder):
        raise _unknown(name, "--profile")
    data = read(path)
    parent = data.get("extends", BASE)
    if parent in seen:
        raise UserError(f"{path}: 'extends' forms a loop ({' -> '.join((*seen, name, parent))})")
    if parent == BASE:
        base_path = folder / f"{BASE}.yaml"
        return ([read(base_path)] if base_path.is_file() else []) + [data]
    return _chain(parent, folder, (*seen, name)) + [data]


def load(name: str) -> Profile:
    """A profile's verl settings: base.yaml, then each profile it extends, then its own, merged by OmegaConf."""
    from omegaconf import OmegaConf

    folder = profiles_dir()
    chain = _chain(name, folder)
    data = chain[-1]
    merged = OmegaConf.merge(*(OmegaConf.create(part.get("verl") or {}) for part in chain))
    return Profile(
        name=name,
        path=folder / f"{name}.yaml",
        description=str(data.get("description", "")),
        match={k: float(v) for k, v in (data.get("match") or {}).items()},
        measured={k: float(v) for k, v in (data.get("measured") or {}).items()},
        verl=OmegaConf.to_container(merged),
    )


def select(gpus: list[GPUInfo] | tuple[GPUInfo, ...]) -> tuple[Profile, list[str]]:
    """The profile for the weakest of the GPUs a run uses, and notes worth printing (memory below what the profile
    was sized for, mixed GPU models).

    Among the profiles whose compute-capability range holds the GPU, the narrowest range wins, then the largest
    memory size (`match.memory_gib`) the GPU has (10 % tolerance: a 24 GB card reports 23.9 GiB)."""
    from verl_p40.plan.layout import weakest

    gpu = weakest(gpus)
    candidates = [load(name) for name in available()]
    matching = [p for p in candidates if p.fits(gpu)]
    if not matching:
        raise UserError(
            f"no profile fits {gpu.describe()} (compute capability below 6.0 is not supported); "
            f"pick one with --profile ({', '.join(available())})"
        )
    width = lambda p: p.match.get("max_compute_capability", 99) - p.match.get("min_compute_capability", 0)  # noqa: E731
    narrowest = min(width(p) for p in matching)
    matching = [p for p in matching if width(p) == narrowest]
    memory = lambda p: p.match.get("memory_gib", 0.0)  # noqa: E731
    fitting = [p for p in matching if memory(p) <= gpu.memory_total_gib * 1.1]
    profile = max(fitting, key=memory) if fitting else min(matching, key=memory)
    notes = [f"auto profile: {profile.name} for {gpu.describe()}"]
    sized_for = memory(profile)
    if sized_for and gpu.memory_total_gib < sized_for * 0.95:
        notes.append(
            f"warning: profile {profile.name} is sized for {sized_for:.0f} GB and this GPU has "
            f"{gpu.memory_total_gib:.1f} GiB: lower data.train_batch_size and the micro-batch sizes, or offload "
            "(actor_rollout_ref.actor.fsdp_config.param_offload=true ...)"
        )
    if len({(g.name, g.compute_capability, round(g.memory_total_gib)) for g in gpus}) > 1:
        notes.append(f"mixed GPUs ({'; '.join(g.describe() for g in gpus)}): sized for the weakest, GPU {gpu.index}")
    return profile, notes
