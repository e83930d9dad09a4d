"""The plan's steps, in the order `planner.plan()` runs them. Each is a function of what it needs (the options, the
machine's facts, what an earlier step decided) and returns what it decides: a Part (verl overrides, trainer
environment and notes: plan/part.py), or a frozen result holding one beside a decision later steps read (the
hardware, the recipe, the batch, the schedule). A later step takes such a value, never the override strings of the
steps before it; what it reads of the settings so far (the run's own included) the planner hands it. The memory plan
is plan/memory_plan.py's and the paths step plan/paths.py's. The run's own KEY=VALUE settings win (`user_settings`,
after every step but `old_log_probs`, which keeps the user's p40_log_probs=pass or rollout and resolves their auto).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path

from verl_p40 import UserError, defaults, reward
from verl_p40.plan import algorithms, engines, log_probs
from verl_p40.plan import layout as layout_mod
from verl_p40.plan import profiles as profiles_mod
from verl_p40.plan import schedule as schedule_mod
from verl_p40.plan.capabilities import MIN_SM, has
from verl_p40.plan.capabilities import name as sm_name
from verl_p40.plan.facts import Facts
from verl_p40.plan.inputs import Inputs
from verl_p40.plan.part import MINE, Part
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.verlconfig import (
    Override,
    base_config,
    check_settings,
    hydra_value,
    profile_overrides,
    settings_overrides,
)

REWARD_DEFAULTS = {"method": "strict", "format_bonus": 0.0}  # verl's own GSM8K rule


@dataclass(frozen=True)
class Hardware:
    """What the hardware step decides: the GPUs and hosts, the profile completed for them, the weakest GPU's compute
    capability (None: no GPU seen), and the notes on each choice."""

    layout: layout_mod.Layout
    profile: profiles_mod.Profile
    sm: float | None
    part: Part


@dataclass(frozen=True)
class Recipe:
    """The algorithm as its file has it (with its batch, if it sets one), and the answers per prompt."""

    algorithm: algorithms.Algorithm
    samples: int


@dataclass(frozen=True)
class Batch:
    """What the batch step decides, in prompts as verl counts them: a step's (data.train_batch_size) and the actor's
    mini-batch (None: not a whole number, which the rules name once the config is composed), and its part."""

    part: Part
    prompts: int | None
    mini_batch: int | None

    def as_run_sets(self, user: list[Override]) -> Batch:
        """The batch the run has: the run's own data.train_batch_size and actor mini-batch win over the step's."""
        sets = {o.key.lstrip("+"): o.value.strip() for o in user}

        def own(key: str, decided: int | None) -> int | None:
            if key not in sets:
                return decided
            return int(sets[key]) if sets[key].isdigit() else None

        prompts_key, mini_key = layout_mod.BATCH_KEYS[:2]
        return replace(self, prompts=own(prompts_key, self.prompts), mini_batch=own(mini_key, self.mini_batch))


@dataclass(frozen=True)
class Scheduled:
    """The passes over the data the announced steps need (None: not counted), and the step's part."""

    part: Part
    schedule: schedule_mod.Schedule | None = None


def resolve_profile(
    name: str, gpus: tuple | None, no_gpu: str | None = None
) -> tuple[profiles_mod.Profile, list[str], float | None]:
    """The profile for the run's GPUs (the weakest of them, for auto), notes on the choice, and the weakest GPU's
    compute capability (None without a driver). `no_gpu`: NVML's reason when the machine showed none (Facts.no_gpu,
    read once with the rest of the machine)."""
    sm = layout_mod.weakest(gpus).sm if gpus else None
    if name != "auto":
        return profiles_mod.load(name), [f"profile: {name} (chosen by name)"], sm
    if not gpus:
        from verl_p40.gpu.nvml import NO_GPU_EXIT

        raise UserError(
            f"--profile auto: {no_gpu or 'no GPU'}; pass --profile NAME ({', '.join(profiles_mod.available())})",
            NO_GPU_EXIT,
        )
    profile, notes = profiles_mod.select(gpus)
    return profile, notes, sm


def hardware(options: RunOptions, facts: Facts, user_sets: dict[str, str]) -> Hardware:
    """The layout of the GPUs and hosts, the profile for them, completed for what the machine has installed."""
    found = list(facts.gpus) if facts.gpus is not None else None
    layout = layout_mod.choose(found, options.gpus, options.nodes, options.batch)
    profile, notes, sm = resolve_profile(options.profile, layout.gpus, facts.no_gpu)
    check_settings(profile.verl, str(profile.path))
    where = engines.Where(sm=sm, vllm=facts.vllm, triton=facts.triton)
    completed, choices = engines.complete(profile.verl, where, user_sets)
    return Hardware(layout, dataclasses.replace(profile, verl=completed), sm, Part(notes=notes + choices))


def recipe(options: RunOptions) -> Recipe:
    """The algorithm, checked, and its answers per prompt (--samples-per-prompt over the recipe's)."""
    algorithm = algorithms.load(options.algorithm)
    check_settings(algorithm.verl, str(algorithm.path))
    return Recipe(algorithm, options.samples_per_prompt or algorithm.samples_per_prompt)


def profile_settings(profile: profiles_mod.Profile) -> Part:
    """The profile's verl settings, but its batch: the batch step decides that."""
    return Part(overrides=[o for o in profile_overrides(profile) if o.key not in layout_mod.BATCH_KEYS])


def placement(layout: layout_mod.Layout) -> Part:
    """verl's counts of GPUs and hosts (what fits on each GPU once FSDP shards the states W ways is the memory plan's
    question, plan/memory_plan.py)."""
    values, notes = layout_mod.settings(layout)
    origin = f"--gpus/--nodes ({layout.describe()})"
    return Part(overrides=[Override(key, str(value), origin) for key, value in values.items()], notes=notes)


def _samples_origin(options: RunOptions, chosen: Recipe) -> str:
    n = chosen.samples
    return f"--algorithm {chosen.algorithm.name}" + (f" --samples-per-prompt {n}" if options.samples_per_prompt else "")


def batch(options: RunOptions, hw: Hardware, chosen: Recipe) -> Batch:
    """The batch's arithmetic in one place: the profile's sequences a step and a mini-batch (the recipe's prompts x n
    in their place), x the GPUs with --batch per-gpu (by default the recipe's batch is split over them), then in
    prompts: verl counts both in prompts and multiplies them by n. Each value names the last step that changed it."""
    from omegaconf import OmegaConf

    n, profile = chosen.samples, hw.profile
    sequences, _ = algorithms.with_batch(profile.verl, chosen.algorithm, n)
    tree = OmegaConf.create(sequences)
    values = {k: (OmegaConf.select(tree, k), str(profile.path)) for k in layout_mod.BATCH_KEYS}
    scaled, notes = layout_mod.batch(hw.layout, sequences, options.batch)
    for key, value in scaled.items():
        OmegaConf.update(tree, key, value)
        values[key] = (value, f"--gpus/--nodes ({hw.layout.describe()})")
    origin = _samples_origin(options, chosen)
    for key, value in algorithms.batch_per_prompt(OmegaConf.to_container(tree), n, origin).items():
        values[key] = (value, f"{origin} ({n} samples per prompt)")
    out = [Override(key, str(value), where) for key, (value, where) in values.items() if value is not None]
    # a size no file sets is verl's default, as the composed config has it
    prompts, mini = (_whole(values[k][0] or OmegaConf.select(base_config(), k)) for k in layout_mod.BATCH_KEYS[:2])
    return Batch(Part(overrides=out, notes=notes), prompts, mini)


def reward_settings() -> Part:
    """verl-p40's GSM8K rule, strict unless the recipe (`recipe_settings`) or the options (`reward_options`) say
    otherwise."""
    return Part(
        overrides=[
            Override("custom_reward_function.path", hydra_value(reward.__file__), MINE),
            Override("custom_reward_function.name", "compute_score", MINE),
            *settings_overrides({"custom_reward_function": {"reward_kwargs": REWARD_DEFAULTS}}, MINE),
        ]
    )


def recipe_settings(chosen: Recipe) -> Part:
    """The recipe's own verl settings (its batch is the batch step's)."""
    algorithm = algorithms.without_batch(chosen.algorithm)
    return Part(overrides=settings_overrides(algorithm.verl, str(algorithm.path)))


def reward_options(options: RunOptions) -> Part:
    """--reward-method and --format-bonus, over the recipe's reward."""
    return Part(
        overrides=[
            Override(f"custom_reward_function.reward_kwargs.{key}", hydra_value(value), f"--{flag}")
            for key, flag, value in (
                ("method", "reward-method", options.reward_method),
                ("format_bonus", "format-bonus", options.format_bonus),
            )
            if value is not None
        ]
    )


def lora(options: RunOptions) -> Part:
    o = options
    settings = algorithms.lora(o.lora_rank, o.lora_alpha)
    if settings:
        return Part(
            overrides=settings_overrides(settings.verl, f"--lora-rank {o.lora_rank} ({settings.path})"),
            notes=[
                f"{settings.description}, on every linear layer; the reference model is the actor with its adapter "
                "switched off"
            ],
        )
    if o.lora_alpha is not None:  # e.g. LORA_ALPHA left in .env after LORA_RANK went back to 0
        return Part(notes=[f"--lora-alpha {o.lora_alpha} (or $VERL_P40_LORA_ALPHA) has no effect without --lora-rank"])
    return Part()


def samples(options: RunOptions, chosen: Recipe) -> Part:
    """Answers per prompt and the experiment's name; its note (the algorithm's) is completed by the planner with the
    composed batch (a --set data.train_batch_size wins)."""
    algorithm, n = chosen.algorithm, chosen.samples
    origin = _samples_origin(options, chosen)
    out = [Override("actor_rollout_ref.rollout.n", str(n), origin)] if options.samples_per_prompt else []
    name = algorithms.experiment_name(options.model, algorithm.name, options.lora_rank)
    out.append(Override("trainer.experiment_name", name, MINE))
    note = f"algorithm: {algorithm.name} ({algorithm.estimator}), {n} sample{'s' * (n > 1)} per prompt"
    return Part(overrides=out, notes=[note])


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def schedule(batch: Batch, tree, settings: list[Override], user: list[Override], inputs: Inputs) -> Scheduled:
    """The passes over the data verl needs for the announced steps (trainer.total_epochs), counted on the rows verl
    keeps; a trainer.total_epochs of the user's own that cannot reach them is refused here, before Ray starts.
    `batch`: the batch the run has; `tree`: verl's settings so far, the run's own included (None: not readable, and
    to_hydra names why once the steps are done); `settings`: the overrides they come from, for their origins;
    `inputs`: the train file's rows and prompts, read at the door."""
    from omegaconf import OmegaConf

    if tree is None:
        return Scheduled(Part())
    get = lambda key: OmegaConf.select(tree, key, default=None)  # noqa: E731
    prompts, epochs = batch.prompts, _whole(get("trainer.total_epochs"))
    steps, longest = get("trainer.total_training_steps"), _whole(get("data.max_prompt_length"))
    if not prompts or prompts < 1 or epochs is None or longest is None or (steps is not None and not _whole(steps)):
        return Scheduled(Part())  # a value verl would refuse: the rules name it once the config is composed
    mine = {o.key.lstrip("+"): o.origin for o in user}
    origins = {o.key.lstrip("+"): o.origin for o in settings}
    train = Path(str(get("data.train_files")))
    filtered = bool(get("data.filter_overlong_prompts"))
    rows = schedule_mod.train_rows(train, inputs.rows.get(str(train)), inputs.prompts, filtered, longest, inputs.here)
    counted = schedule_mod.plan(
        rows,
        prompts,
        steps,
        epochs,
        mine.get("trainer.total_epochs"),
        origins.get("trainer.total_training_steps", "trainer.total_training_steps"),
    )
    out = []
    if counted.epochs != epochs:
        origin = f"{counted.steps} steps of {prompts} prompts"
        out.append(Override("trainer.total_epochs", str(counted.epochs), origin))
    return Scheduled(Part(overrides=out, notes=[counted.line()]), counted)


def tensorboard(profile: profiles_mod.Profile, facts: Facts) -> Part:
    logger = profile.verl.get("trainer", {}).get("logger", ["console"])
    if "tensorboard" in logger and not facts.tensorboard:
        logger = [name for name in logger if name != "tensorboard"]
        return Part(
            overrides=[Override("trainer.logger", hydra_value(logger), MINE)],
            notes=["tensorboard is not installed: logging to the console only"],
        )
    return Part()


def tf32_on(mode: str, sm: float | None) -> bool:
    """Whether the trainer's workers switch TF32 on: `auto` on sm_80+ (Ampere and newer); never below sm_80, where
    there are no TF32 units (a P40 keeps full fp32). Without a GPU seen here, `auto` leaves it off. The option's
    choices (auto, on, off) are checked where the option is read."""
    if mode == "on" and sm is not None and not has("tf32", sm):
        raise UserError(
            f"--tf32 on: TF32 needs an {sm_name(MIN_SM['tf32'])}+ GPU (Ampere or newer); this one is {sm_name(sm)}. "
            "Use --tf32 auto or off"
        )
    return mode == "on" or (mode == "auto" and has("tf32", sm))


def worker_hooks(options: RunOptions, sm: float | None, user_sets: dict[str, str]) -> Part:
    """What every trainer worker sets before it builds a model (verl_p40.worker_hooks, through verl's external_lib): the
    memory cap, TF32, cuDNN attention off."""
    o = options
    part, hooked = Part(), []
    if o.gpu_memory_cap_gb is not None:  # checked where the option is read (run_options)
        part.env[defaults.WORKER_MEMORY_CAP_ENV] = f"{o.gpu_memory_cap_gb:g}"
        hooked.append("--gpu-memory-cap-gb")
        part.notes.append(f"GPU memory capped at {o.gpu_memory_cap_gb:g} GB per process")
    if tf32_on(o.tf32, sm):
        part.env[defaults.TF32_ENV] = "1"
        hooked.append("--tf32")
        part.notes.append(f"TF32 matmuls on (--tf32 {o.tf32}" + (f", {sm_name(sm)})" if sm else ")"))
    elif has("tf32", sm):
        part.notes.append("TF32 matmuls off (--tf32 off)")
    own_hook = "actor_rollout_ref.model.external_lib" in user_sets
    if has("cudnn_attention", sm) and own_hook:
        part.notes.append(
            "cuDNN attention left as PyTorch has it: your actor_rollout_ref.model.external_lib takes the hook"
        )
    elif has("cudnn_attention", sm):
        # A precaution: cuDNN's SDPA backward on sm_90 with an attention mask is reported upstream to give NaN
        # gradients in bf16/fp16 (pytorch/pytorch#196678, torch 2.11+); bench/sdpa_nan_check.py did not show it
        # on an H200 (bench/results/precision-2026-12-01/). fp32 never uses it, and FlashAttention or the
        # memory-efficient kernel take its place. Off in every worker, so a bf16 plan never meets it.
        part.env[defaults.NO_CUDNN_ATTENTION_ENV] = "1"
        hooked.append("cuDNN attention off")
        part.notes.append(
            "cuDNN attention off in the workers (a precaution: pytorch#196678 reports NaN bf16 gradients)"
        )
    if hooked and own_hook:
        raise UserError(
            f"{' and '.join(hooked)} work through actor_rollout_ref.model.external_lib; "
            "it cannot be combined with your own external_lib ("
            + ", ".join("use --tf32 off" if h == "--tf32" else f"leave out {h}" for h in hooked)
            + ", or drop your external_lib)"
        )
    if hooked:
        part.overrides.append(
            Override("actor_rollout_ref.model.external_lib", defaults.WORKER_HOOKS_MODULE, " and ".join(hooked))
        )
    return part


def old_log_probs(options: RunOptions, sm: float | None, tree, user_sets: dict[str, str]) -> Part:
    """The PPO ratio's old log-probs from the rollout where they are the pass's own (plan/log_probs.py), verl's
    old_log_prob pass elsewhere; the run's own p40_log_probs=pass (or rollout) wins. `tree`: verl's settings the
    earlier steps and the user give (None: not readable, and to_hydra names why once the steps are done)."""
    if tree is None:
        return Part()
    asked = user_sets.get(log_probs.KEY)
    value, note = log_probs.decide(tree, tf32_on(options.tf32, sm), asked)
    origin = f"--set {log_probs.KEY}={asked}" if asked else "the old log-probs' source (plan/log_probs.py)"
    return Part(overrides=[Override(log_probs.KEY, value, origin)], notes=[note])


def user_settings(user: list[Override]) -> Part:
    """The run's own KEY=VALUE settings, after the steps (but `old_log_probs`, which resolves the user's own
    p40_log_probs), so they win."""
    return Part(overrides=list(user))
