"""A run's options -> its checked RunPlan: `verl-p40 config` prints it, `train` and `bench` run it.

We do not wrap verl's trainer: we compute Hydra overrides and check them against verl's config, composed once per
plan; `verl_p40.run.trainer` then runs `python -m verl.trainer.main_ppo <overrides>`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_p40 import UserError, defaults, reward
from verl_p40.gpu.nvml import detect_gpus
from verl_p40.plan import algorithms, engines
from verl_p40.plan import layout as layout_mod
from verl_p40.plan import profiles as profiles_mod
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.verlconfig import (
    Override,
    check_settings,
    compose,
    hydra_value,
    parse_set,
    profile_overrides,
    settings_overrides,
    to_hydra,
)

REWARD_DEFAULTS = {"method": "strict", "format_bonus": 0.0}  # verl's own GSM8K rule


@dataclass
class RunPlan:
    profile: profiles_mod.Profile
    notes: list[str]
    overrides: list[str]  # Hydra override strings, validated against verl's config
    env: dict[str, str]  # extra environment for the trainer process
    record: dict = field(default_factory=dict)  # what checkpoints of this run were made with (RUN_RECORD)
    composed: Any = field(default=None, repr=False)  # verl's config for the overrides, composed once by plan()
    validation_questions: int | None = None  # rows of the file verl validates on (None: not readable here)

    def config(self):
        """verl's composed config for this plan (OmegaConf; shared: read it, do not change it)."""
        if self.composed is None:
            self.composed = compose(self.overrides)
        return self.composed

    def command(self) -> list[str]:
        return [sys.executable, "-m", "verl.trainer.main_ppo", *self.overrides]

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = " \\\n    ".join(shlex.quote(part) for part in self.command())
        return f"{env} {cmd}" if env else cmd


def resolve_profile(name: str, gpus: tuple | None) -> tuple[profiles_mod.Profile, list[str], float | None]:
    """The profile for the run's GPUs (the weakest of them, for auto), notes on the choice, and the weakest GPU's
    compute capability (None without a driver)."""
    from verl_p40.plan.layout import weakest

    sm = weakest(gpus).sm if gpus else None
    if name != "auto":
        return profiles_mod.load(name), [f"profile: {name} (chosen by name)"], sm
    if not gpus:
        from verl_p40.gpu.nvml import detect

        try:
            detect()  # the driver's own reason, with its exit code
            reason, code = "no GPU", 3
        except UserError as exc:
            reason, code = str(exc), exc.exit_code
        raise UserError(f"--profile auto: {reason}; pass --profile NAME ({', '.join(profiles_mod.available())})", code)
    profile, notes = profiles_mod.select(gpus)
    return profile, notes, sm


def layout_overrides(
    layout: layout_mod.Layout, profile: profiles_mod.Profile, model: str, cap_gb: float | None
) -> tuple[list[Override], list[str]]:
    """verl settings for the GPUs and hosts: counts, batches scaled by the world size, and offloaded states that fit
    on the GPU once sharded (from the profile's one-GPU measurement of the same model size)."""
    from verl_p40.plan import budget

    values, notes = layout_mod.settings(layout, profile.verl)
    origin = f"--gpus/--nodes ({layout.describe()})"
    out = [Override(key, str(value), origin) for key, value in values.items()]
    if layout.world > 1 and profile.measured:
        try:
            parameters = budget.model_parameters(Path(model).expanduser())
        except (OSError, UserError, ValueError, KeyError):
            parameters = None
        keep, why = layout_mod.unoffload(layout, profile.verl, parameters, profile.measured, cap_gb)
        out += [Override(key, "false", f"{origin}: sharded {layout.world} ways") for key in keep]
        notes += why
    return out, notes


MODEL_PATH_KEYS = ("actor_rollout_ref.model.path", "critic.model.path", "critic.model.tokenizer_path")
VALIDATION_EVERY = 10  # steps between validations on val.parquet; trainer.test_freq=N (a later value) wins


def validation_split(data: Path, notes: list[str]) -> str:
    """The file verl validates on: val.parquet (`prep --val-size`) when the data folder has one, else test.parquet."""
    if (data / "val.parquet").is_file():
        notes.append("validation: val.parquet (train rows held out by prep --val-size; the test split stays unseen)")
        return "val.parquet"
    return "test.parquet"


def tf32_on(mode: str, sm: float | None) -> bool:
    """Whether the trainer's workers switch TF32 on: `auto` on sm_80+ (Ampere and newer); never below sm_80, where
    there are no TF32 units (a P40 keeps full fp32). Without a GPU seen here, `auto` leaves it off."""
    if mode not in ("auto", "on", "off"):
        raise UserError(f"--tf32 {mode!r}: use auto, on or off")
    if mode == "on" and sm is not None and sm < 8.0:
        raise UserError(
            f"--tf32 on: TF32 needs an sm_80+ GPU (Ampere or newer); this one is sm_{sm * 10:.0f}. "
            "Use --tf32 auto or off"
        )
    return mode == "on" or (mode == "auto" and sm is not None and sm >= 8.0)


def _tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def plan(options: RunOptions) -> RunPlan:
    layout = layout_mod.choose(detect_gpus(), options.gpus, options.nodes)
    profile, notes, sm = resolve_profile(options.profile, layout.gpus)
    check_settings(profile.verl, str(profile.path))
    user = parse_set(options.sets)  # the run's own KEY=VALUE settings, read once
    user_sets = {o.key.lstrip("+"): o.value for o in user}
    completed, choices = engines.complete(profile.verl, engines.here(sm), user_sets)
    algorithm = algorithms.load(options.algorithm)
    check_settings(algorithm.verl, str(algorithm.path))
    n = options.samples_per_prompt or algorithm.samples_per_prompt
    # a recipe that sets its own batch (in prompts) replaces the profile's before the layout scales it
    verl_settings, algorithm = algorithms.with_batch(completed, algorithm, n)
    profile = dataclasses.replace(profile, verl=verl_settings)
    notes += choices
    overrides: list[Override] = profile_overrides(profile)
    placed, placement_notes = layout_overrides(layout, profile, options.model, options.gpu_memory_cap_gb)
    overrides += placed
    notes += placement_notes
    # the algorithm divides the batch per prompt: it starts from the batch the layout scaled
    scaled = {o.key: int(o.value) for o in placed if o.key in layout_mod.BATCH_KEYS}
    if scaled:
        from omegaconf import OmegaConf

        tree = OmegaConf.create(profile.verl)
        for key, value in scaled.items():
            OmegaConf.update(tree, key, value)
        profile = dataclasses.replace(profile, verl=OmegaConf.to_container(tree))
    mine = "verl-p40 options"
    # the reward: verl-p40's GSM8K rule, strict unless the algorithm file (a recipe) or the options say otherwise
    overrides += [
        Override("custom_reward_function.path", hydra_value(reward.__file__), mine),
        Override("custom_reward_function.name", "compute_score", mine),
        *settings_overrides({"custom_reward_function": {"reward_kwargs": REWARD_DEFAULTS}}, mine),
    ]
    overrides += settings_overrides(algorithm.verl, str(algorithm.path))
    overrides += [
        Override(f"custom_reward_function.reward_kwargs.{key}", hydra_value(value), f"--{flag}")
        for key, flag, value in (
            ("method", "reward-method", options.reward_method),
            ("format_bonus", "format-bonus", options.format_bonus),
        )
        if value is not None
    ]
    lora = algorithms.lora(options.lora_rank, options.lora_alpha)
    if lora:
        overrides += settings_overrides(lora.verl, f"--lora-rank {options.lora_rank} ({lora.path})")
        notes.append(
            f"{lora.description}, on every linear layer; the reference model is the actor with its adapter switched off"
        )
    elif options.lora_alpha is not None:  # e.g. LORA_ALPHA left in .env after LORA_RANK went back to 0
        notes.append(f"--lora-alpha {options.lora_alpha} (or $VERL_P40_LORA_ALPHA) has no effect without --lora-rank")
    origin = f"--algorithm {algorithm.name}" + (f" --samples-per-prompt {n}" if options.samples_per_prompt else "")
    if options.samples_per_prompt:
        overrides.append(Override("actor_rollout_ref.rollout.n", str(n), origin))
    per_prompt = algorithms.batch_per_prompt(profile.verl, n, origin)
    overrides += [Override(key, str(value), f"{origin} ({n} samples per prompt)") for key, value in per_prompt.items()]
    algorithm_note = len(notes)  # completed with the composed batch below (a --set data.train_batch_size wins)
    notes.append(f"algorithm: {algorithm.name} ({algorithm.estimator}), {n} sample{'s' * (n > 1)} per prompt")
    overrides.append(
        Override(
            "trainer.experiment_name",
            algorithms.experiment_name(options.model, algorithm.name, options.lora_rank),
            mine,
        )
    )
    model = str(Path(options.model).expanduser())
    data = Path(options.data).expanduser()
    checkpoints = Path(options.checkpoints).expanduser().absolute()
    env: dict[str, str] = {
        "TENSORBOARD_DIR": str(Path(options.logs).expanduser().absolute() / "tensorboard"),
        **layout_mod.env(layout),
    }
    # Without expandable segments the caching allocator kept 4 GB reserved-but-unusable at the 24 GB cap and
    # the actor update ran out of memory (bench/results, first p40-profile run).
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))

    logger = profile.verl.get("trainer", {}).get("logger", ["console"])
    if "tensorboard" in logger and not _tensorboard_available():
        logger = [name for name in logger if name != "tensorboard"]
        notes.append("tensorboard is not installed: logging to the console only")
        overrides.append(Override("trainer.logger", hydra_value(logger), mine))

    for item in user:  # one model for actor, reference, critic and tokenizer, checked first
        if item.key.lstrip("+") in MODEL_PATH_KEYS:
            raise UserError(
                f"{item.origin}: give the model as --model {item.value} instead: it sets the actor, the reference, the "
                "critic and the tokenizer together, and the preflight checks that folder"
            )
    overrides += [
        Override("actor_rollout_ref.model.path", hydra_value(model), mine),
        Override("critic.model.path", hydra_value(model), mine),
        Override("data.train_files", hydra_value(str(data / "train.parquet")), mine),
        Override("data.val_files", hydra_value(str(data / validation_split(data, notes))), mine),
        Override("trainer.default_local_dir", f"{hydra_value(str(checkpoints))}/${{trainer.experiment_name}}", mine),
    ]
    if (data / "val.parquet").is_file():  # a slice held out to choose settings on: validate on it as the run goes
        overrides.append(Override("trainer.test_freq", str(VALIDATION_EVERY), "val.parquet (prep --val-size)"))
    hooked = []  # the options verl_p40.memcap applies in every worker
    if options.gpu_memory_cap_gb is not None:
        if options.gpu_memory_cap_gb <= 0:
            raise UserError("--gpu-memory-cap-gb must be positive")
        env[defaults.GPU_MEMORY_CAP_ENV] = f"{options.gpu_memory_cap_gb:g}"
        hooked.append("--gpu-memory-cap-gb")
        notes.append(f"GPU memory capped at {options.gpu_memory_cap_gb:g} GB per process")
    if tf32_on(options.tf32, sm):
        env[defaults.TF32_ENV] = "1"
        hooked.append("--tf32")
        notes.append(f"TF32 matmuls on (--tf32 {options.tf32}" + (f", sm_{sm * 10:.0f})" if sm else ")"))
    elif sm is not None and sm >= 8.0:
        notes.append("TF32 matmuls off (--tf32 off)")
    own_hook = "actor_rollout_ref.model.external_lib" in user_sets
    if sm is not None and sm >= 8.0 and own_hook:
        notes.append("cuDNN attention left as PyTorch has it: your actor_rollout_ref.model.external_lib takes the hook")
    elif sm is not None and sm >= 8.0:
        # A precaution: cuDNN's SDPA backward on sm_90 with an attention mask is reported upstream to give NaN
        # gradients in bf16/fp16 (pytorch/pytorch#196678, torch 2.11+); bench/sdpa_nan_check.py did not show it
        # on an H200 (bench/results/precision-2026-12-01/). fp32 never uses it, and FlashAttention or the
        # memory-efficient kernel take its place. Off in every worker, so a bf16 plan never meets it.
        env[defaults.NO_CUDNN_ATTENTION_ENV] = "1"
        hooked.append("cuDNN attention off")
        notes.append("cuDNN attention off in the workers (a precaution: pytorch#196678 reports NaN bf16 gradients)")
    if hooked:
        overrides.append(Override("actor_rollout_ref.model.external_lib", defaults.MEMCAP_MODULE, " and ".join(hooked)))
    if hooked and own_hook:
        raise UserError(
            f"{' and '.join(hooked)} work through actor_rollout_ref.model.external_lib; "
            "it cannot be combined with your own external_lib ("
            + ", ".join("use --tf32 off" if h == "--tf32" else f"leave out {h}" for h in hooked)
            + ", or drop your external_lib)"
        )
    overrides += user
    hydra_overrides = to_hydra(overrides)
    cfg = compose(hydra_overrides)  # raises a clear UserError on anything verl's config rejects
    notes[algorithm_note] += f", {cfg.data.train_batch_size} prompts a step"
    from verl_p40.plan import rules
    from verl_p40.plan.verlconfig import base_config

    rules.check(cfg, base_config(), {o.key.lstrip("+~"): o.origin for o in overrides})
    model_cfg = cfg.actor_rollout_ref.model
    record = {
        "checkpoints": str(cfg.trainer.default_local_dir),
        "profile": profile.name,
        "world_size": int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes),
        "resume_mode": str(cfg.trainer.resume_mode),
        "algorithm": algorithm.name,
        "adv_estimator": str(cfg.algorithm.adv_estimator),
        "samples_per_prompt": int(cfg.actor_rollout_ref.rollout.n),
        "model": str(model_cfg.path),
        "lora": (
            {
                "rank": int(model_cfg.lora_rank),
                "alpha": int(model_cfg.lora_alpha),
                "target_modules": _plain(model_cfg.target_modules),
            }
            if model_cfg.lora_rank
            else None
        ),
    }
    return RunPlan(
        profile=profile,
        notes=notes,
        overrides=hydra_overrides,
        env=env,
        record=record,
        composed=cfg,
        validation_questions=_rows(Path(str(cfg.data.val_files))),
    )


def _rows(path: Path) -> int | None:
    try:
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:  # a config made elsewhere: the file is not here (the trainer says so if it is not there either)
        return None


def _plain(value):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def config_yaml(run: RunPlan) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(run.config(), resolve=True)
