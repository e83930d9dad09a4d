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
    "*.p40_update_tokens",  # verl-p40's own (patches/p40_update.py)
    "actor_rollout_ref.rollout.micro_batch_size",
    "actor_rollout_ref.rollout.p40_decode",  # verl-p40's own (patches/p40_decode.py)
    "actor_rollout_ref.rollout.p40_decode_compact",  # verl-p40's own (patches/p40_decode.py)
    "actor_rollout_ref.rollout.p40_prefill_groups",  # verl-p40's own (patches/p40_decode.py)
    "actor_rollout_ref.rollout.p40_log_probs",  # verl-p40's own (plan/log_probs.py, patches/p40_old_log_probs.py)
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
    """Dotted keys of a nested mapping's values; an empty mapping sets nothing."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
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


def _base_value(key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(base_config(), key, default=_MISSING)


def known_key(key: str) -> bool:
    return _base_value(key) is not _MISSING


def is_section(key: str) -> bool:
    """A key that holds a non-empty group of verl's settings (data, trainer, actor_rollout_ref.actor, ...)."""
    from omegaconf import OmegaConf

    value = _base_value(key)
    return OmegaConf.is_dict(value) and len(value) > 0


def is_extension(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in EXTENSION_KEYS)


@functools.lru_cache(maxsize=1)
def _override_parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _where(item: Override) -> str:
    """Where an override came from, and the override where that does not say it (a settings file)."""
    return item.origin if item.origin.startswith("--set ") else f"{item.origin}: {item.key}"


def _parsed(text: str, where: str):
    """Hydra's reading of one override; a line naming it and the fix when Hydra cannot read it."""
    from hydra.errors import HydraException

    try:
        parsed = _override_parser().parse_override(text)
    except HydraException as exc:
        problem = " ".join(str(exc).split())
        raise UserError(
            f"{where}: not a Hydra override ({problem}); write key=value, and quote a value with brackets, braces, "
            "commas or spaces in it: key='...'"
        ) from None
    if parsed.is_sweep_override():
        raise UserError(
            f"{where}: several values (a Hydra sweep); a list is key=[a,b], text with commas is quoted: key='a,b'"
        )
    return parsed


def set_values(items: list[str]) -> dict[str, Any]:
    """The run's own `--set` values as Hydra reads them (quotes taken off, numbers and booleans typed), by key; the
    last of a key wins, as in the composed config."""
    values = {}
    for item in parse_set(items):
        if item.value and not item.key.startswith("~"):
            values[item.key.lstrip("+")] = _parsed(f"{item.key}={item.value}", _where(item)).value()
    return values


def _checked(item: Override, earlier: set[str]) -> str:
    """The Hydra override string for one override, or a line naming its origin and the fix. `earlier`: the keys the
    overrides before it set."""
    prefix = item.key[: len(item.key) - len(item.key.lstrip("+~"))]
    key = item.key[len(prefix) :]
    where = _where(item)
    parsed = _parsed(item.key if prefix == "~" and not item.value else f"{item.key}={item.value}", where)
    if prefix not in ("", "+", "++", "~") or not key or parsed.key_or_group != key:
        raise UserError(f"{where}: expected key=value, +key=value (a new key) or ~key (delete one)")
    if prefix == "~":
        if known_key(key):
            raise UserError(
                f"{where}: verl {VERL_VERSION}'s trainer reads {key}, so deleting it breaks the run; "
                f"set it instead ({key}=VALUE)"
            )
        if key not in earlier:
            if not is_extension(key):
                raise UserError(
                    f"{where}: verl {VERL_VERSION} has no config key {key!r}, so there is nothing to delete"
                )
            raise UserError(f"{where}: nothing sets {key}, so there is nothing to delete")
        return item.key + (f"={item.value}" if item.value else "")
    if prefix == "+" and known_key(key):
        raise UserError(f"{where}: verl {VERL_VERSION} already has {key}; drop the '+' ({key}={item.value})")
    if is_section(key):
        raise UserError(
            f"{where}: {key} is a section of verl's config, not a value; set the keys inside it one by one "
            f"({key}.KEY=VALUE)"
        )
    if prefix:  # a key added on purpose (+, or ++: add or replace)
        return f"{item.key}={item.value}"
    if known_key(key):
        return item.text(add=False)
    if is_extension(key):
        return item.text(add=True)
    raise UserError(
        f"{item.origin}: verl {VERL_VERSION} has no config key {key!r} "
        "(see verl/trainer/config/ppo_trainer.yaml; prefix with '+' to add a key on purpose)"
    )


def to_hydra(overrides: list[Override]) -> list[str]:
    """Hydra override strings; an override Hydra cannot read, a key verl neither declares nor reads, a whole section,
    `+` on a key verl has and `~` on one it reads are errors naming their origin."""
    out: list[str] = []
    earlier: set[str] = set()
    for item in overrides:
        out.append(_checked(item, earlier))
        earlier.add(item.key.lstrip("+~"))
    # A later override of the same key wins, as on Hydra's command line; keep only the last.
    last: dict[str, str] = {}
    for text in out:
        last[text.split("=", 1)[0].lstrip("+")] = text
    return list(last.values())


def preview(overrides: list[Override]):
    """verl's defaults with `overrides` applied value by value, without Hydra's compose: what a plan step reads of the
    settings so far (cheap; the plan composes and checks the whole list once at its end)."""
    from omegaconf import OmegaConf

    tree = OmegaConf.create(OmegaConf.to_container(base_config()))
    for item in overrides:
        key = item.key.lstrip("+~")
        if item.key.startswith("~"):
            continue
        value = _parsed(f"{key}={item.value}", _where(item)).value()
        OmegaConf.update(tree, key, value, force_add=True)
    return tree


def parse_set(items: list[str]) -> list[Override]:
    overrides = []
    for item in items:
        key, equals, value = item.partition("=")
        if not (equals or key.startswith("~")) or not key.strip().lstrip("+~"):
            raise UserError(f"--set {item!r}: expected key=value")
        overrides.append(Override(key.strip(), value, f"--set {item}"))
    return overrides


def settings_overrides(tree: dict, origin: str) -> list[Override]:
    """Overrides for a nested mapping of verl values (a profile, an algorithm, LoRA), each naming `origin`."""
    return [Override(key, hydra_value(value), origin) for key, value in flatten(tree).items()]


def check_settings(tree: dict, origin: str) -> None:
    """A settings file's verl values checked before anything reads them: as `to_hydra` checks overrides (a section
    where a value belongs, a key verl does not have) and typed as verl's defaults are (text where a number belongs)."""
    from omegaconf import OmegaConf

    from verl_p40.plan import rules

    overrides = settings_overrides(tree, origin)
    to_hydra(overrides)
    problems = rules.type_problems(OmegaConf.create(tree), base_config(), {o.key: origin for o in overrides})
    if problems:
        raise UserError("; ".join(problems))


def profile_overrides(profile: Profile) -> list[Override]:
    return settings_overrides(profile.verl, str(profile.path))
