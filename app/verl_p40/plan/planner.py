"""A run's options -> its checked RunPlan: `verl-p40 config` prints it, `train` and `bench` run it.

We do not wrap verl's trainer: we compute Hydra overrides and check them against verl's config, composed once per
plan; `verl_p40.run.trainer` then runs `python -m verl.trainer.main_ppo <overrides>`.

`plan()` runs the ordered steps of `verl_p40.plan.steps` (each returns its overrides, environment and notes), then
composes verl's config once, checks it against the rules and writes the run record. What it reads from the machine
comes in as `Facts` (`Facts.here()` by default), so a plan for another card needs no GPU.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_p40.plan import profiles as profiles_mod
from verl_p40.plan import steps as plan_steps
from verl_p40.plan.facts import Facts
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.schedule import parquet_rows
from verl_p40.plan.verlconfig import compose, to_hydra
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


def plan(options: RunOptions, facts: Facts | None = None) -> RunPlan:
    """The checked plan of a run of `options` on the machine `facts` describes (this one by default)."""
    draft = plan_steps.new_draft(options, facts if facts is not None else Facts.here())
    overrides, env, notes = [], {}, []
    for step in plan_steps.STEPS:
        draft.notes_so_far, draft.overrides_so_far = len(notes), overrides
        part = step(draft)
        overrides += part.overrides
        env.update(part.env)
        notes += part.notes
    hydra_overrides = to_hydra(overrides)
    cfg = compose(hydra_overrides)  # raises a clear UserError on anything verl's config rejects
    notes[draft.algorithm_note] += f", {cfg.data.train_batch_size} prompts a step"
    from verl_p40.plan import rules
    from verl_p40.plan.verlconfig import base_config

    rules.check(cfg, base_config(), {o.key.lstrip("+~"): o.origin for o in overrides})
    return RunPlan(
        profile=draft.profile,
        notes=notes,
        overrides=hydra_overrides,
        env=env,
        record=run_record(cfg, draft),
        composed=cfg,
        validation_questions=parquet_rows(Path(str(cfg.data.val_files))),
    )


def run_record(cfg: Any, draft: plan_steps.Draft) -> dict:
    """What checkpoints of this run are made with (models/checkpoints.py writes it beside them)."""
    model_cfg, run = cfg.actor_rollout_ref.model, Workload.of(cfg)
    return {
        "checkpoints": str(cfg.trainer.default_local_dir),
        "profile": draft.profile.name,
        "world_size": run.gpus,
        "resume_mode": str(cfg.trainer.resume_mode),
        "algorithm": draft.algorithm.name,
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
        "memory": draft.memory,  # the memory plan's prediction; verl logs the measured peak every step
        # prompts a step, steps, passes over the data and its rows (plan/schedule.py), as composed
        **(draft.schedule.record() if draft.schedule else {}),
        "prompts_per_step": int(cfg.data.train_batch_size),
        "steps": _steps(cfg, draft),
    }


def _steps(cfg: Any, draft: plan_steps.Draft) -> int | None:
    """The step the run ends at: verl's trainer.total_training_steps, else the schedule's count (None: not counted)."""
    if cfg.trainer.total_training_steps is not None:
        return int(cfg.trainer.total_training_steps)
    return draft.schedule.steps if draft.schedule and draft.schedule.batches else None


def _plain(value):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def config_yaml(run: RunPlan) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(run.config(), resolve=True)
