"""Turn a profile plus the user's options into Hydra overrides for verl 0.5.0's `ppo_trainer` config.

The overrides are checked against verl's own config with Hydra's compose API before anything runs: a key verl
does not know fails here, naming where it came from (the profile file or `--set`). The same override list is
what `verl-p40 train` hands to `python -m verl.trainer.main_ppo`, so what `verl-p40 config` prints is what runs.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_p40 import VERL_VERSION, UserError
from verl_p40.plan.profiles import Profile

# Keys verl 0.5.0 reads with `.get()` but does not declare in its YAML: Hydra needs a `+` to add them.
EXTENSION_KEYS = (
    "*.fsdp_config.model_dtype",
    "*.fsdp_config.mixed_precision.*",
    "*.model.override_config.*",
    "*.model.trim_padding",  # verl-p40's own (patches/p40_trim.py)
    "actor_rollout_ref.rollout.micro_batch_size",
    "custom_reward_function.reward_kwargs.*",
)
_MISSING = object()
_BARE = re.compile(r"^[A-Za-z0-9_./\-:~@]+$")


@dataclass(frozen=True)
class Override:
    key: str
    value: str  # already in Hydra's override syntax
    origin: str  # where it came from, for error messages

    def text(self, add: bool) -> str:
        return f"{'+' if add else ''}{self.key}={self.value}"


def hydra_value(value: Any) -> str:
    """A Python value written in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _BARE.match(text) and text.lower() not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def verl_config_dir() -> Path:
    from verl_p40.patches import PatchError, default_verl_dir, verl_version

    try:
        root = default_verl_dir()
    except PatchError:
        raise UserError(
            f"verl is not installed: this command composes against verl {VERL_VERSION}'s config "
            f"(pip install --no-deps verl=={VERL_VERSION}, or use the verl-p40 image)"
        ) from None
    found = verl_version(root)
    if found != VERL_VERSION:
        raise UserError(f"verl {found} is installed at {root}; verl-p40 targets verl {VERL_VERSION}")
    return root / "trainer" / "config"


def compose(overrides: list[str]):
    """verl's `ppo_trainer` config with `overrides` applied, through Hydra's compose API."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            cfg = hydra_compose(config_name="ppo_trainer", overrides=overrides)
        OmegaConf.resolve(cfg)  # a broken ${...} fails here, not inside the trainer
        return cfg
    except (HydraException, OmegaConfBaseException) as exc:
        message = str(exc).strip().splitlines()
        raise UserError(f"verl {VERL_VERSION} config rejected the overrides: {' '.join(message)}") from None


@functools.lru_cache(maxsize=1)
def base_config():
    """verl's own `ppo_trainer` defaults (read-only: shared)."""
    return compose([])


def known_key(key: str) -> bool:
    from omegaconf import OmegaConf

    return OmegaConf.select(base_config(), key, default=_MISSING) is not _MISSING


def is_extension(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in EXTENSION_KEYS)


def to_hydra(overrides: list[Override]) -> list[str]:
    """Hydra override strings; a key verl neither declares nor reads is an error naming its origin."""
    out = []
    for item in overrides:
        if item.key.startswith(("+", "~")):  # the user spoke Hydra directly
            out.append(f"{item.key}={item.value}" if item.key.startswith("+") else item.key)
        elif known_key(item.key):
            out.append(item.text(add=False))
        elif is_extension(item.key):
            out.append(item.text(add=True))
        else:
            raise UserError(
                f"{item.origin}: verl {VERL_VERSION} has no config key {item.key!r} "
                "(see verl/trainer/config/ppo_trainer.yaml; prefix with '+' to add a key on purpose)"
            )
    # A later override of the same key wins, as on Hydra's command line; keep only the last.
    last: dict[str, str] = {}
    for text in out:
        last[text.split("=", 1)[0].lstrip("+")] = text
    return list(last.values())


def parse_set(items: list[str]) -> list[Override]:
    overrides = []
    for item in items:
        if "=" not in item and not item.startswith("~"):
            raise UserError(f"--set {item!r}: expected key=value")
        key, _, value = item.partition("=")
        overrides.append(Override(key.strip(), value, f"--set {item}"))
    return overrides


def settings_overrides(tree: dict, origin: str) -> list[Override]:
    """Overrides for a nested mapping of verl values (a profile, an algorithm, LoRA), each naming `origin`."""
    return [Override(key, hydra_value(value), origin) for key, value in flatten(tree).items()]


def profile_overrides(profile: Profile) -> list[Override]:
    return settings_overrides(profile.verl, str(profile.path))
