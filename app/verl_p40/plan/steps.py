"""The plan's steps, in the order `planner.plan()` runs them. Each is a function of what it needs (the options, the
machine's facts, what an earlier step decided) and returns what it decides: a Part (verl overrides, trainer
environment and notes), or a frozen result holding one beside a decision later steps read (the hardware, the recipe,
the memory plan's record, the schedule). The run's own KEY=VALUE settings win (`user_settings`, after every step but
`old_log_probs`, which keeps the user's p40_log_probs=pass or rollout and resolves their auto).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from verl_p40 import UserError, defaults, reward
from verl_p40.patches import p40_best
from verl_p40.plan import algorithms, engines, log_probs
from verl_p40.plan import layout as layout_mod
from verl_p40.plan import profiles as profiles_mod
from verl_p40.plan import schedule as schedule_mod
from verl_p40.plan.capabilities import MIN_SM, has
from verl_p40.plan.capabilities import name as sm_name
from verl_p40.plan.facts import Facts
from verl_p40.plan.memory import STATES as MEMORY_STATES
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.verlconfig import (
    Override,
    check_settings,
    hydra_value,
    profile_overrides,
    settings_overrides,
)
from verl_p40.plan.workload import OFFLOAD_KEYS, Workload

REWARD_DEFAULTS = {"method": "strict", "format_bonus": 0.0}  # verl's own GSM8K rule
MODEL_PATH_KEYS = ("actor_rollout_ref.model.path", "critic.model.path", "critic.model.tokenizer_path")
VALIDATION_EVERY = 10  # steps between validations on val.parquet; trainer.test_freq=N (a later value) wins
MINE = "verl-p40 options"


@dataclass(frozen=True)
class Part:
    """What one step adds to the plan."""

    overrides: list[Override] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


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
class Sized:
    """What the memory plan decides, and what the run record keeps of it (None: no card to size for)."""

    part: Part
    record: dict | None = None


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
    question, `memory_plan`)."""
    values, notes = layout_mod.settings(layout)
    origin = f"--gpus/--nodes ({layout.describe()})"
    return Part(overrides=[Override(key, str(value), origin) for key, value in values.items()], notes=notes)


def _samples_origin(options: RunOptions, chosen: Recipe) -> str:
    n = chosen.samples
    return f"--algorithm {chosen.algorithm.name}" + (f" --samples-per-prompt {n}" if options.samples_per_prompt else "")


def batch(options: RunOptions, hw: Hardware, chosen: Recipe) -> Part:
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
    return Part(overrides=out, notes=notes)


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


MEMORY_KEYS = {
    "generation": ("actor_rollout_ref.rollout.micro_batch_size",),
    "update_micro": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu"),
    # rows x columns of a length-grouped update micro-batch (patches/p40_update.py; 0: verl's micro-batches)
    "update_tokens": ("actor_rollout_ref.actor.p40_update_tokens", "critic.p40_update_tokens"),
    "logprob_micro": (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ),
    # the actor's only: the critic keeps its checkpointing (without it, torch 2.6's critic backward under FSDP2 failed
    # with "modified by an inplace operation" in the Docker e2e of 2026-12-02)
    "checkpointing": ("actor_rollout_ref.model.enable_gradient_checkpointing",),
}
STATE_KEYS = {state: OFFLOAD_KEYS[state] for state in MEMORY_STATES}  # the offload key that keeps it off the GPU
STATE_WORDS = {
    "actor_optimizer": "actor Adam states",
    "reference_params": "reference weights",
    "critic_params": "critic weights",
    "critic_optimizer": "critic Adam states",
}


def _card_gib(hw: Hardware) -> float | None:
    """The memory of the weakest GPU the run uses; without GPU facts, the card the profile is sized for."""
    if hw.layout.gpus:
        return layout_mod.weakest(hw.layout.gpus).memory_total_gib
    return hw.profile.match.get("memory_gib")


def _memory_step(cfg, shape) -> tuple:
    from omegaconf import OmegaConf

    from verl_p40.plan import memory as mem

    get = lambda key, default=None: OmegaConf.select(cfg, key, default=default)  # noqa: E731
    run = Workload.of(cfg)
    world, n = run.gpus, run.samples
    step = mem.Step(
        sequences=max(1, int(get("data.train_batch_size")) * n // world),
        prompt_width=int(get("data.max_prompt_length")),
        response_width=int(get("data.max_response_length")),
        critic=run.critic,
        reference=run.reference,
        lora=run.lora,
        world=world,
        mini_batch=max(1, int(get("actor_rollout_ref.actor.ppo_mini_batch_size")) * n // world),
        regrouped=run.regroups,
    )
    start = mem.Sizes(
        generation=int(get(MEMORY_KEYS["generation"][0]) or step.sequences),
        update_micro=int(get(MEMORY_KEYS["update_micro"][0]) or 1),
        logprob_micro=int(get(MEMORY_KEYS["logprob_micro"][0]) or 1),
        checkpointing=bool(get(MEMORY_KEYS["checkpointing"][0], False)),
        resident=frozenset(s for s in STATE_KEYS if not run.on_host(s)),
        update_tokens=max(int(get(key) or 0) for key in MEMORY_KEYS["update_tokens"]),  # the critic's, if larger
    )
    return step, start


def memory_plan(options: RunOptions, hw: Hardware, settings: list[Override], user: list[Override]) -> Sized:
    """Generation chunk, micro-batches, gradient checkpointing and states on the GPU, sized from the card's memory
    (NVML's total, or --gpu-memory-cap-gb) by verl_p40.plan.memory's model. A size the run's own settings give stays
    theirs (`settings`: the steps' overrides so far, then the run's own). Without a card (no GPU seen, no profile size),
    the profile's plan is kept."""
    from omegaconf.errors import OmegaConfBaseException

    from verl_p40.plan import memory as mem
    from verl_p40.plan.verlconfig import preview

    card = _card_gib(hw)
    if not card:
        return Sized(Part())
    try:
        shape = mem.Shape.of_folder(Path(options.model).expanduser())
    except (OSError, ValueError, KeyError):
        shape = mem.QWEN_05B  # the model is not here (a config made elsewhere): size it as the product's model
    try:
        step, start = _memory_step(preview(settings), shape)
    except (UserError, ValueError, TypeError, AttributeError, OmegaConfBaseException):
        return Sized(Part())  # a value that is no number (or no override): the plan's checks at its end name it
    fixed = _fixed_by(user, hw.profile)
    usable = mem.usable_bytes(card, options.gpu_memory_cap_gb)
    budget = mem.BUDGET * usable
    # a card as large as the one the profile was measured on runs the profile's own sizes at least
    sized_for = hw.profile.match.get("memory_gib") or 0.0
    cap = options.gpu_memory_cap_gb
    measured = min(card * 2**30 / 1e9, cap or float("inf")) >= 0.95 * sized_for * 2**30 / 1e9
    floor = replace(start, update_tokens=0) if measured else None  # a token budget was never measured
    sizes = mem.choose(shape, step, start, budget, fixed, floor)
    offer = sizes.update_tokens if "update_tokens" not in fixed else 0
    sizes = replace(sizes, update_tokens=0) if offer else sizes  # offered, not set: timed, not yet validated over a run
    peaks = mem.phase_peaks(shape, step, sizes)
    unmeasured = floor is None or sizes.update_cells(step.width) > floor.update_cells(step.width)
    if unmeasured and max(peaks.values()) > budget:  # said before Ray starts: memcap would end the run in an OOM
        raise UserError(_memory_refused(options, user, shape, step, start, fixed, card, usable, budget))
    origin = f"memory plan ({usable / 1e9:.1f} GB for the allocator)"
    out = [
        Override(key, hydra_value(getattr(sizes, name)), origin)
        for name, keys in MEMORY_KEYS.items()
        if name not in fixed
        for key in keys
    ]
    out += [
        Override(key, hydra_value(state not in sizes.resident), origin)
        for state, key in STATE_KEYS.items()
        if state not in fixed
    ]
    note, record = _memory_said(sizes, step, peaks, usable, budget)
    return Sized(Part(overrides=out, notes=[note, *_regroup_offer(offer, step)]), record)


def _regroup_offer(tokens: int, step) -> list[str]:
    """The length-grouped update the memory plan found room for (patches/p40_update.py: every token keeps its weight,
    tests/unit_base/test_update_regroup.py), offered rather than set until a run validates it and its memory estimate is
    corrected (timed in bench/results/speedups-2026-12-05; bench/next-device-session.md, issue 60)."""
    if not tokens:
        return []
    keys = MEMORY_KEYS["update_tokens"] if step.critic else MEMORY_KEYS["update_tokens"][:1]
    sets = " ".join(f"{key}={tokens}" for key in keys)
    return [
        f"update: verl's micro-batches; length-grouped ones of {tokens} tokens fit (the same gradient; under the P40 "
        "mask, GRPO at 2048 tokens: the update 7 % shorter on 3 GB more; not the default until validated): "
        f"--set {sets}"
    ]


def _fixed_by(user: list[Override], profile: profiles_mod.Profile) -> set[str]:
    """The memory plan's sizes and states that the run's own settings give (or the strategy keeps as measured)."""
    from omegaconf import OmegaConf

    from verl_p40.plan.verlconfig import preview

    sets = {o.key.lstrip("+") for o in user}
    fixed = {name for name, keys in MEMORY_KEYS.items() if any(k in sets for k in keys)}
    fixed |= {state for state, key in STATE_KEYS.items() if key in sets}
    if OmegaConf.select(preview(user), "actor_rollout_ref.actor.strategy") != "fsdp" or (
        profile.verl.get("actor_rollout_ref", {}).get("actor", {}).get("strategy", "fsdp") != "fsdp"
    ):
        fixed.add("checkpointing")  # measured without it on FSDP1 only: FSDP2 keeps the profile's checkpointing
    return fixed


def _memory_said(sizes, step, peaks: dict[str, float], usable: float, budget: float) -> tuple[str, dict]:
    """The memory plan's console line, and what the run record keeps of it."""
    from verl_p40.plan import memory as mem

    top = max(peaks, key=peaks.get)
    kept = [STATE_WORDS[s] for s in mem.STATES if s in sizes.resident and _state_used(s, step)]
    ckpt = "with" if sizes.checkpointing else "without"
    regrouped = f" (length-grouped within {sizes.update_tokens} tokens)" if sizes.update_tokens else ""
    note = (
        f"memory plan for {usable / 1e9:.1f} GB: generation {sizes.generation} sequences at once, update micro-batch "
        f"{sizes.update_micro} {ckpt} gradient checkpointing{regrouped}, log-prob micro-batch {sizes.logprob_micro}; "
        f"on the GPU: {', '.join(kept) if kept else 'weights only (the rest offloaded)'}; predicted peak "
        f"{peaks[top] / 1e9:.1f} GB ({top}), "
        + (f"within {budget / 1e9:.1f} GB" if peaks[top] <= budget else "the profile's measured sizes")
    )
    record = {
        "allocator_gb": round(usable / 1e9, 2),
        "budget_gb": round(budget / 1e9, 2),
        "predicted_peak_gb": round(peaks[top] / 1e9, 2),
        "predicted_phase_peaks_gb": {k: round(v / 1e9, 2) for k, v in peaks.items()},
        "sizes": {
            "generation": sizes.generation,
            "update_micro": sizes.update_micro,
            "update_tokens": sizes.update_tokens,
            "logprob_micro": sizes.logprob_micro,
            "gradient_checkpointing": sizes.checkpointing,
            "on_gpu": sorted(sizes.resident),
        },
    }
    return note, record


def _memory_refused(options: RunOptions, user: list[Override], shape, step, start, fixed, card, usable, budget) -> str:
    """The one line for a card or cap the plan cannot fit, with what would (each checked by the same model): the
    states the profile keeps on the GPU offloaded, the sizes the run's settings fix left to the plan, LoRA, another
    cap or a larger GPU."""
    import math

    from verl_p40.plan import memory as mem

    cap = options.gpu_memory_cap_gb
    sets = {o.key.lstrip("+") for o in user}
    peak = lambda st, sz: max(mem.phase_peaks(shape, st, sz).items(), key=lambda kv: kv[1])  # noqa: E731
    where = f"--gpu-memory-cap-gb {cap:g}" if cap else f"this GPU's {card:.1f} GiB"
    within = f"the {budget / 1e9:.1f} GB it plans within ({mem.BUDGET:.0%} of {usable / 1e9:.1f} GB for the allocator)"
    least = mem.smallest(start, fixed)
    phase, bytes_ = peak(step, least)
    if bytes_ <= budget:  # the profile keeps states on the GPU that the plan does not take off it
        kept = sorted(start.resident - least.resident - fixed)
        phase, bytes_ = peak(step, replace(least, resident=start.resident))
        sets = " ".join(f"--set {STATE_KEYS[s]}=true" for s in kept)
        return (
            f"{where}: the plan does not fit: its predicted peak is {bytes_ / 1e9:.1f} GB ({phase}) with "
            f"{', '.join(STATE_WORDS[s] for s in kept)} on the GPU, over {within}; what would fit: offload them "
            f"({sets}), or a larger cap"
        )
    ways = []
    if fixed and peak(step, mem.smallest(start, set()))[1] <= budget:
        keys = [k for name in sorted(fixed) for k in (*MEMORY_KEYS.get(name, ()), STATE_KEYS.get(name)) if k]
        ways.append(f"leave {', '.join(k for k in keys if k in sets)} to the memory plan")
    if not step.lora and peak(replace(step, lora=True), least)[1] <= budget:
        ways.append("LoRA (--lora-rank 32: no full gradients nor Adam states)")
    need = math.ceil(peak(step, mem.smallest(start, set()))[1] / mem.BUDGET / 1e8) / 10  # GB the allocator needs
    if cap and need * 1e9 <= card * 2**30 - mem.CONTEXT_BYTES:
        ways.append(f"a cap of {need:.1f} GB or more")
    else:
        ways.append(f"a GPU with {need + mem.CONTEXT_BYTES / 1e9:.1f} GB or more")
    return (
        f"{where}: the plan does not fit: its predicted peak is {bytes_ / 1e9:.1f} GB ({phase}) even at its "
        f"smallest sizes (micro-batches of 1, gradient checkpointing, every state offloaded), over {within}; what "
        f"would fit: {'; '.join(ways)}"
    )


def _state_used(state: str, step) -> bool:
    return (
        (state.startswith("critic") and step.critic)
        or (state == "reference_params" and step.reference)
        or (state == "actor_optimizer" and not step.lora)
    )


def validation_split(data: Path, notes: list[str]) -> str:
    """The file verl validates on: val.parquet (prep's default, or `--val-size`) when the data folder has one, else
    test.parquet."""
    if (data / "val.parquet").is_file():
        notes.append("validation: val.parquet (train rows held out by prep; the test split stays unseen)")
        return "val.parquet"
    return "test.parquet"


def paths(options: RunOptions, user: list[Override], layout: layout_mod.Layout) -> Part:
    """One model for actor, reference, critic and tokenizer; the data files; the checkpoint folder (with each
    validation's per-question results in its `validation/`); the logs."""
    o = options
    for item in user:  # a model path given as a verl key is refused before anything else reads it
        if item.key.lstrip("+") in MODEL_PATH_KEYS:
            raise UserError(
                f"{item.origin}: give the model as --model {item.value} instead: it sets the actor, the reference, the "
                "critic and the tokenizer together, and the preflight checks that folder"
            )
    model = str(Path(o.model).expanduser())
    data = Path(o.data).expanduser()
    checkpoints = Path(o.checkpoints).expanduser().absolute()
    notes: list[str] = []
    out = [
        Override("actor_rollout_ref.model.path", hydra_value(model), MINE),
        Override("critic.model.path", hydra_value(model), MINE),
        Override("data.train_files", hydra_value(str(data / "train.parquet")), MINE),
        Override("data.val_files", hydra_value(str(data / validation_split(data, notes))), MINE),
        Override("trainer.default_local_dir", f"{hydra_value(str(checkpoints))}/${{trainer.experiment_name}}", MINE),
        # every validation's answers, question by question, beside the checkpoints: `best` pairs steps on them
        Override(
            "trainer.validation_data_dir",
            f"{hydra_value(str(checkpoints))}/${{trainer.experiment_name}}/{p40_best.FOLDER}",
            MINE,
        ),
    ]
    if (data / "val.parquet").is_file():  # a slice held out to choose settings on: validate on it as the run goes
        # saved at every validation, so the best validated step is on disk (retention keeps it: p40_checkpoints);
        # validated before the first step too, so the gain is measured against the model before training
        origin = "val.parquet (held out by prep)"
        out += [
            Override("trainer.test_freq", str(VALIDATION_EVERY), origin),
            Override("trainer.save_freq", str(VALIDATION_EVERY), origin),
            Override("trainer.val_before_train", "true", origin),
        ]
    env = {
        "TENSORBOARD_DIR": str(Path(o.logs).expanduser().absolute() / "tensorboard"),
        **layout_mod.env(layout),
    }
    # Without expandable segments the caching allocator kept 4 GB reserved-but-unusable at the 24 GB cap and
    # the actor update ran out of memory (bench/results, first p40-profile run).
    env["PYTORCH_CUDA_ALLOC_CONF"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    return Part(overrides=out, env=env, notes=notes)


def _whole(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def schedule(settings: list[Override], user: list[Override]) -> Scheduled:
    """The passes over the data verl needs for the announced steps (trainer.total_epochs), counted on the rows verl
    keeps; a trainer.total_epochs of the user's own that cannot reach them is refused here, before Ray starts.
    `settings`: the steps' overrides so far, then the run's own (`user`)."""
    from omegaconf import OmegaConf

    from verl_p40.plan.verlconfig import preview

    try:
        tree = preview(settings)
    except Exception:  # e.g. a whole section set as a value: to_hydra names it with its fix once the steps are done
        return Scheduled(Part())
    get = lambda key: OmegaConf.select(tree, key, default=None)  # noqa: E731
    prompts, epochs = _whole(get("data.train_batch_size")), _whole(get("trainer.total_epochs"))
    steps, longest = get("trainer.total_training_steps"), _whole(get("data.max_prompt_length"))
    if not prompts or prompts < 1 or epochs is None or longest is None or (steps is not None and not _whole(steps)):
        return Scheduled(Part())  # a value verl would refuse: the rules name it once the config is composed
    mine = {o.key.lstrip("+"): o.origin for o in user}
    origins = {o.key.lstrip("+"): o.origin for o in settings}
    tokenizer = get("actor_rollout_ref.model.tokenizer_path") or get("actor_rollout_ref.model.path")
    rows = schedule_mod.train_rows(
        Path(str(get("data.train_files"))), bool(get("data.filter_overlong_prompts")), longest, str(tokenizer)
    )
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


def old_log_probs(options: RunOptions, sm: float | None, so_far: list[Override], user_sets: dict[str, str]) -> Part:
    """The PPO ratio's old log-probs from the rollout where they are the pass's own (plan/log_probs.py), verl's
    old_log_prob pass elsewhere; the run's own p40_log_probs=pass (or rollout) wins. `so_far`: the overrides the
    earlier steps and the user give."""
    from verl_p40.plan.verlconfig import preview

    try:
        tree = preview(so_far)
    except Exception:  # a value that is no value: to_hydra names it with its fix once the steps are done
        return Part()
    asked = user_sets.get(log_probs.KEY)
    value, note = log_probs.decide(tree, tf32_on(options.tf32, sm), asked)
    origin = f"--set {log_probs.KEY}={asked}" if asked else "the old log-probs' source (plan/log_probs.py)"
    return Part(overrides=[Override(log_probs.KEY, value, origin)], notes=[note])


def user_settings(user: list[Override]) -> Part:
    """The run's own KEY=VALUE settings, after the steps (but `old_log_probs`, which resolves the user's own
    p40_log_probs), so they win."""
    return Part(overrides=list(user))
