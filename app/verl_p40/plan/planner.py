"""A run's options -> its checked RunPlan: `verl-p40 config` prints it, `train` and `bench` run it.

We do not wrap verl's trainer: we compute Hydra overrides and check them against verl's config, composed once per
plan; `verl_p40.run.trainer` then runs `python -m verl.trainer.main_ppo <overrides>`.

`plan()` runs the ordered steps of `verl_p40.plan.steps`, handing each what it needs (the options, the facts, what an
earlier step decided) and collecting what each returns (overrides, environment and notes), then composes verl's
config once, checks it against the rules and writes the run record. What it reads from the machine comes in as
`Facts` (`Facts.here()` by default), so a plan for another card needs no GPU, and what it reads from the disk and the
environment as `Inputs` (plan/inputs.py: `Inputs.read(options)` by default), so the steps read neither.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_p40.plan import memory_plan
from verl_p40.plan import paths as run_paths
from verl_p40.plan import profiles as profiles_mod
from verl_p40.plan import steps as plan_steps
from verl_p40.plan.facts import Facts
from verl_p40.plan.inputs import Inputs
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.schedule import Schedule
from verl_p40.plan.verlconfig import Override, compose, parse_set, preview, to_hydra
from verl_p40.plan.workload import Workload


@dataclass
class RunPlan:
    profile: profiles_mod.Profile
    notes: list[str]
    overrides: list[str]  # Hydra override strings, validated against verl's config
    env: dict[str, str]  # extra environment for the trainer process
    record: dict = field(default_factory=dict)  # what checkpoints of this run were made with (RUN_RECORD)
    composed: Any = field(default=None, repr=False)  # verl's config for the overrides, composed once by plan()
    validation_questions: int | None = None  # rows of the file verl validates on (None: not readable here)
    inputs: Inputs = field(default_factory=Inputs.absent, repr=False)  # the folders and variables it was planned with

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


def plan(options: RunOptions, facts: Facts | None = None, inputs: Inputs | None = None) -> RunPlan:
    """The checked plan of a run of `options` on the machine `facts` describes (this one by default), with the folders
    and variables `inputs` read (`Inputs.read(options)` by default; `Inputs.absent()` for a card you do not have): the
    steps of `verl_p40.plan.steps` in their order, each handed what it needs, then verl's config composed once and
    checked. Nothing else of the machine is read while planning (tests/unit_plan/test_inputs.py)."""
    facts = facts if facts is not None else Facts.here()
    inputs = inputs if inputs is not None else Inputs.read(options)
    user = parse_set(options.sets)
    user_sets = {o.key.lstrip("+"): o.value for o in user}
    hw = plan_steps.hardware(options, facts, user_sets)
    chosen = plan_steps.recipe(options)
    algorithm = plan_steps.samples(options, chosen)
    parts = [
        hw.part,
        plan_steps.profile_settings(hw.profile),
        plan_steps.placement(hw.layout),
        (batch := plan_steps.batch(options, hw, chosen)).part,
        plan_steps.reward_settings(),
        plan_steps.recipe_settings(chosen),
        plan_steps.reward_options(options),
        plan_steps.lora(options),
        algorithm,
    ]
    run_batch = batch.as_run_sets(user)
    sized = memory_plan.plan(options, hw, run_batch, _so_far(parts, user), user, inputs.model)
    parts += [sized.part, plan_steps.tensorboard(hw.profile, facts), run_paths.paths(options, user, hw.layout, inputs)]
    counted = plan_steps.schedule(run_batch, _so_far(parts, user), _overrides(parts) + user, user, inputs)
    parts += [counted.part, plan_steps.worker_hooks(options, hw.sm, user_sets)]
    parts += [
        plan_steps.user_settings(user),
        # after the user's settings: it resolves their p40_log_probs=auto (and keeps pass or rollout as they are)
        plan_steps.old_log_probs(options, hw.sm, _so_far(parts, user), user_sets),
    ]
    overrides, notes = _overrides(parts), [note for part in parts for note in part.notes]
    hydra_overrides = to_hydra(overrides)
    cfg = compose(hydra_overrides)  # raises a clear UserError on anything verl's config rejects
    at = notes.index(algorithm.notes[0])  # the algorithm's note, completed with the composed batch
    notes[at] += f", {cfg.data.train_batch_size} prompts a step"
    from verl_p40.plan import rules
    from verl_p40.plan.verlconfig import base_config

    rules.check(cfg, base_config(), {o.key.lstrip("+~"): o.origin for o in overrides})
    return RunPlan(
        profile=hw.profile,
        notes=notes,
        overrides=hydra_overrides,
        env={key: value for part in parts for key, value in part.env.items()},
        record=run_record(cfg, hw.profile.name, chosen.algorithm.name, sized.record, counted.schedule),
        composed=cfg,
        validation_questions=inputs.rows.get(str(Path(str(cfg.data.val_files)))),
        inputs=inputs,
    )


def _overrides(parts: list[plan_steps.Part]) -> list[Override]:
    return [override for part in parts for override in part.overrides]


def _so_far(parts: list[plan_steps.Part], user: list[Override]):
    """verl's settings the steps so far and the run's own give, for a step that reads them (None: one is no value
    Hydra can read; to_hydra names it with its fix once the steps are done). The one place the plan reads its own
    overrides back (tests/unit_plan/test_memory_plan_home.py counts the callers of `preview`)."""
    try:
        return preview(_overrides(parts) + user)
    except Exception:  # e.g. a whole section set as a value
        return None


def run_record(cfg: Any, profile: str, algorithm: str, memory: dict | None, schedule: Schedule | None) -> dict:
    """What checkpoints of this run are made with (models/checkpoints.py writes it beside them)."""
    model_cfg, run = cfg.actor_rollout_ref.model, Workload.of(cfg)
    return {
        "checkpoints": str(cfg.trainer.default_local_dir),
        "profile": profile,
        "world_size": run.gpus,
        "resume_mode": str(cfg.trainer.resume_mode),
        "algorithm": algorithm,
        "adv_estimator": run.estimator,
        "samples_per_prompt": run.samples,
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
        "memory": memory,  # the memory plan's prediction; verl logs the measured peak every step
        # prompts a step, steps, passes over the data and its rows (plan/schedule.py), as composed
        **(schedule.record() if schedule else {}),
        "prompts_per_step": int(cfg.data.train_batch_size),
        "steps": _steps(cfg, schedule),
    }


def _steps(cfg: Any, schedule: Schedule | None) -> int | None:
    """The step the run ends at: verl's trainer.total_training_steps, else the schedule's count (None: not counted)."""
    if cfg.trainer.total_training_steps is not None:
        return int(cfg.trainer.total_training_steps)
    return schedule.steps if schedule and schedule.batches else None


def _plain(value):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def config_yaml(run: RunPlan) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(run.config(), resolve=True)
