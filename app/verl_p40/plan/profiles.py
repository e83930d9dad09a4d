"""Hardware profiles: YAML data in config/profiles/, chosen by name or from what NVML reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from verl_p40 import UserError, defaults
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.options import FOLDER, number_problem, path_problem
from verl_p40.plan.capabilities import MIN_SM

BASE = "base"


def shipped() -> Path:
    """The config folder shipped with the package (verl_p40.configs when installed; a checkout's config/ when the
    package runs from its source folder, as on the GPU machine)."""
    try:
        return Path(str(resources.files("verl_p40.configs")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[3] / "config"


def profiles_dir() -> Path:
    """`$VERL_P40_PROFILES_DIR`, else the profiles shipped with the package (config/profiles in the repo). The variable
    must name a folder with profile files in it."""
    override = defaults.PROFILES_DIR.get()
    if not override:
        return shipped() / "profiles"
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
    return shipped()


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
    # model_parameters: where the profile's sizes were measured (the memory plan, plan/memory.py, sizes a run)
    measured: dict[str, float] = field(default_factory=dict)

    def fits(self, gpu: GPUInfo) -> bool:
        lo = self.match.get("min_compute_capability", 0.0)
        hi = self.match.get("max_compute_capability", 99.0)
        return lo <= gpu.sm <= hi


class _UniqueKeys(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (PyYAML keeps the last and drops the first silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]}): keep one", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: line number, problem, context."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    words = [getattr(exc, "problem", None) or str(exc), getattr(exc, "context", None)]
    return where + " ".join(" ".join(str(w).split()) for w in words if w)


SETTINGS_SHAPE = "a settings file is a mapping with a 'verl' mapping of verl config values"


def read(path: Path) -> dict:
    """A settings file (profile, algorithm, LoRA): a YAML mapping whose `verl` mapping holds verl config values."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({_yaml_problem(exc)})") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if data is None:
        raise UserError(f"{path}: the file is empty; {SETTINGS_SHAPE}")
    if not isinstance(data, dict) or not isinstance(data.get("verl", {}), dict):
        raise UserError(f"{path}: {SETTINGS_SHAPE}")
    return data


def _numbers(data: dict, key: str, path: Path) -> dict[str, float]:
    """A mapping of finite numbers in a profile (`match`, `measured`)."""
    values = data.get(key) or {}
    if not isinstance(values, dict):
        raise UserError(f"{path}: {key} must be a mapping of names to numbers, got {values!r}")
    out = {}
    for name, value in values.items():
        number, problem = number_problem(value, float)
        if problem or isinstance(value, bool):
            raise UserError(f"{path}: {key}.{name} must be a finite number, got {value!r}")
        out[str(name)] = number
    return out


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


def _chain(name: str, folder: Path, seen: tuple[str, ...] = ()) -> list[tuple[Path, dict]]:
    """The profile's file and those it extends, base first, each with its YAML."""
    path = folder / f"{name}.yaml"
    if not known(name, folder):
        raise _unknown(name, "--profile")
    data = read(path)
    parent = data.get("extends", BASE)
    if not isinstance(parent, str) or (parent != BASE and not known(parent, folder)):
        raise UserError(f"{path}: extends {parent!r}, which is not a profile in {folder} ({', '.join(available())})")
    if parent in seen:
        raise UserError(f"{path}: 'extends' forms a loop ({' -> '.join((*seen, name, parent))})")
    if parent == BASE:
        base_path = folder / f"{BASE}.yaml"
        return ([(base_path, read(base_path))] if base_path.is_file() else []) + [(path, data)]
    return _chain(parent, folder, (*seen, name)) + [(path, data)]


def _shape_problem(under: dict, over: dict, prefix: str = "") -> str | None:
    """The first key that is a mapping in one of two settings trees and not in the other."""
    for key, value in over.items():
        if key not in under:
            continue
        if isinstance(under[key], dict) != isinstance(value, dict):
            return f"{prefix}{key}"
        if isinstance(value, dict):
            found = _shape_problem(under[key], value, f"{prefix}{key}.")
            if found:
                return found
    return None


def _merged(chain: list[tuple[Path, dict]]) -> dict:
    """The verl settings of a profile's chain, each file's over the ones before; a file that puts a value where an
    earlier one has a section of settings (or the reverse) is named."""
    from omegaconf import OmegaConf

    merged = OmegaConf.create({})
    for path, data in chain:
        part = data.get("verl") or {}
        key = _shape_problem(OmegaConf.to_container(merged), part)
        if key:
            raise UserError(
                f"{path}: verl.{key} is a section of settings in the profile it extends and a value here (or the "
                "reverse); give a section its keys one by one"
            )
        merged = OmegaConf.merge(merged, OmegaConf.create(part))
    return OmegaConf.to_container(merged)


def load(name: str) -> Profile:
    """A profile's verl settings: base.yaml, then each profile it extends, then its own, merged by OmegaConf."""
    folder = profiles_dir()
    chain = _chain(name, folder)
    path, data = chain[-1]
    return Profile(
        name=name,
        path=path,
        description=str(data.get("description", "")),
        match=_numbers(data, "match", path),
        measured=_numbers(data, "measured", path),
        verl=_merged(chain),
    )


def select(gpus: list[GPUInfo] | tuple[GPUInfo, ...]) -> tuple[Profile, list[str]]:
    """The profile for the weakest of the GPUs a run uses, and notes worth printing (memory below what the profile
    was sized for, mixed GPU models).

    Among the profiles whose compute-capability range holds the GPU, the narrowest range wins, then the largest
    memory size (`match.memory_gib`) the GPU has (10 % tolerance: a 24 GB card reports 23.9 GiB)."""
    from verl_p40.plan.layout import smallest, weakest

    gpu = weakest(gpus)
    candidates = [load(name) for name in available()]
    matching = [p for p in candidates if p.fits(gpu)]
    if not matching:
        raise UserError(
            f"no profile fits {gpu.describe()} (compute capability below {MIN_SM['supported']:.1f} is not supported); "
            f"pick one with --profile ({', '.join(available())})"
        )
    width = lambda p: p.match.get("max_compute_capability", 99) - p.match.get("min_compute_capability", 0)  # noqa: E731
    narrowest = min(width(p) for p in matching)
    matching = [p for p in matching if width(p) == narrowest]
    memory = lambda p: p.match.get("memory_gib", 0.0)  # noqa: E731
    fitting = [p for p in matching if memory(p) <= gpu.memory_total_gib * 1.1]
    profile = max(fitting, key=memory) if fitting else min(matching, key=memory)
    notes = [f"auto profile: {profile.name} for {gpu.describe()}"]
    sized_for, least = memory(profile), smallest(gpus)  # the card the memory plan sizes for
    if sized_for and least.memory_total_gib < sized_for * 0.95:
        notes.append(
            f"warning: profile {profile.name} is sized for {sized_for:.0f} GB and GPU {least.index} has "
            f"{least.memory_total_gib:.1f} GiB: lower data.train_batch_size and the micro-batch sizes, or offload "
            "(actor_rollout_ref.actor.fsdp_config.param_offload=true ...)"
        )
    if len({(g.name, g.compute_capability, round(g.memory_total_gib)) for g in gpus}) > 1:
        notes.append(
            f"mixed GPUs ({'; '.join(g.describe() for g in gpus)}): features for the oldest, GPU {gpu.index}; memory "
            f"for the smallest, GPU {least.index} ({least.memory_total_gib:.1f} GiB)"
        )
    return profile, notes
