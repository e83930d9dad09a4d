"""The memory plan, in one place: the verl keys it sizes (`KEYS`, and the states it keeps on the GPU, `STATE_KEYS`),
the sizes it chooses for the card by `plan/memory.py`'s model, its console line, its refusal of a card or cap the run
cannot fit, and what the run record keeps of it. Which states a run holds at all is `memory.Step.holds`, the one
decision the estimate and the note both read (LoRA's reference is the actor with its adapter off: no reference
weights). No other module of app/ looks these keys up by name
(tests/unit_plan/test_memory_plan_home.py): the projection reads them through `setting`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from verl_p40 import UserError
from verl_p40.plan import layout as layout_mod
from verl_p40.plan import memory as mem
from verl_p40.plan import profiles as profiles_mod
from verl_p40.plan.part import Part
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.verlconfig import Override, base_config, hydra_value
from verl_p40.plan.workload import OFFLOAD_KEYS, PLANNED_BUDGET, UPDATE_TOKENS_KEY, Workload

if TYPE_CHECKING:
    from verl_p40.plan.steps import Batch, Hardware

KEYS = {
    "generation": ("actor_rollout_ref.rollout.micro_batch_size",),
    "update_micro": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu"),
    # rows x columns of a length-grouped update micro-batch (patches/p40_update.py; 0: verl's micro-batches)
    "update_tokens": (UPDATE_TOKENS_KEY, "critic.p40_update_tokens"),
    "logprob_micro": (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ),
    # the actor's only: the critic keeps its checkpointing (without it, torch 2.6's critic backward under FSDP2 failed
    # with "modified by an inplace operation" in the Docker e2e of 2026-12-02)
    "checkpointing": ("actor_rollout_ref.model.enable_gradient_checkpointing",),
}
ENTROPY_KEY = "actor_rollout_ref.actor.entropy_coeff"  # an entropy bonus: not priced (_unpriced)
STATE_KEYS = {state: OFFLOAD_KEYS[state] for state in mem.STATES}  # the offload key that keeps it off the GPU
STRATEGY_KEY = "actor_rollout_ref.actor.strategy"
# the length-grouped update is set where the 20-step run validated it (bench/results/p40-path-compact-2026-12-06: one
# Pascal GPU, fp32, a GRPO actor without a critic or LoRA) and offered elsewhere, where no run has checked its memory
VALIDATED_BELOW_SM = 7.0
STATE_WORDS = {
    "actor_optimizer": "actor Adam states",
    "reference_params": "reference weights",
    "critic_params": "critic weights",
    "critic_optimizer": "critic Adam states",
}


@dataclass(frozen=True)
class Sized:
    """What the memory plan decides (a Part, plan/part.py), and what the run record keeps of it (None: no card to size
    for)."""

    part: Part
    record: dict | None = None


@dataclass(frozen=True)
class Fit:
    """The question the memory plan answers: this model's step on a card, from the profile's sizes (`start`), the
    sizes and states the run's own settings fix, within `budget` of the `usable` bytes."""

    shape: mem.Shape
    step: mem.Step
    start: mem.Sizes
    fixed: frozenset[str]
    card: float  # GiB
    cap: float | None  # --gpu-memory-cap-gb
    usable: float
    budget: float

    def peak(self, step: mem.Step, sizes: mem.Sizes) -> tuple[str, float]:
        return max(mem.phase_peaks(self.shape, step, sizes).items(), key=lambda kv: kv[1])


def setting(tree: Any, name: str, role: int = 0) -> Any:
    """The value a config gives the memory plan's size `name` (of KEYS) for its `role`-th key (the actor's or the
    rollout's first, then the critic's or the reference's), None where it gives none: how the memory plan and the
    projection read a size."""
    from omegaconf import OmegaConf

    return OmegaConf.select(tree, KEYS[name][role], default=None)


def card_gib(hw: Hardware) -> float | None:
    """The memory of the smallest GPU the run uses; without GPU facts, the card the profile is sized for."""
    if hw.layout.gpus:
        return layout_mod.smallest(hw.layout.gpus).memory_total_gib
    return hw.profile.match.get("memory_gib")


def _step(tree: Any, batch: Batch) -> tuple[mem.Step, mem.Sizes]:
    """One GPU's share of a step (the batch step's prompts, the settings' widths and models) and the sizes the
    settings so far give (the profile's plan, or the run's own)."""
    from omegaconf import OmegaConf

    get = lambda key, default=None: OmegaConf.select(tree, key, default=default)  # noqa: E731
    run = Workload.of(tree)
    world, n = run.gpus, run.samples
    if batch.prompts is None or batch.mini_batch is None:
        raise ValueError("no whole batch")
    step = mem.Step(
        sequences=max(1, batch.prompts * n // world),
        prompt_width=int(get("data.max_prompt_length")),
        response_width=int(get("data.max_response_length")),
        critic=run.critic,
        reference=run.reference,
        lora=run.lora,
        world=world,
        mini_batch=max(1, batch.mini_batch * n // world),
        regrouped=run.regroups,
    )
    start = mem.Sizes(
        generation=int(setting(tree, "generation") or step.sequences),
        update_micro=int(setting(tree, "update_micro") or 1),
        logprob_micro=int(setting(tree, "logprob_micro") or 1),
        checkpointing=bool(setting(tree, "checkpointing") or False),
        resident=frozenset(s for s in STATE_KEYS if not run.on_host(s)),
        update_tokens=max(int(setting(tree, "update_tokens", role) or 0) for role in (0, 1)),  # the critic's, if larger
    )
    return step, start


def plan(
    options: RunOptions, hw: Hardware, batch: Batch, tree: Any, user: list[Override], model: Mapping[str, Any] | None
) -> Sized:
    """Generation chunk, micro-batches, gradient checkpointing and states on the GPU, sized from the card's memory
    (NVML's total, or --gpu-memory-cap-gb) by verl_p40.plan.memory's model for the model's config.json (`model`, as
    `Inputs` read it; None: not here, sized as the product's model). A size the run's own settings give stays theirs
    (`tree`: verl's settings so far, the run's own included; None where they could not be read). Without a card (no
    GPU seen, no profile size), the profile's plan is kept."""
    from omegaconf.errors import OmegaConfBaseException

    card = card_gib(hw)
    if not card or tree is None:
        return Sized(Part())
    try:
        shape = mem.Shape.from_config(model) if model is not None else mem.QWEN_05B
    except (ValueError, KeyError, TypeError):
        shape = mem.QWEN_05B  # the model is not here (a config made elsewhere): size it as the product's model
    try:
        step, start = _step(tree, batch)
    except (UserError, ValueError, TypeError, AttributeError, OmegaConfBaseException):
        return Sized(Part())  # a value that is no number (or no override): the plan's checks at its end name it
    usable = mem.usable_bytes(card, options.gpu_memory_cap_gb)
    cap = options.gpu_memory_cap_gb
    fit = Fit(shape, step, start, _fixed_by(user, tree, hw.profile), card, cap, usable, mem.BUDGET * usable)
    # a card as large as the one the profile was measured on runs the profile's own sizes at least
    sized_for = hw.profile.match.get("memory_gib") or 0.0
    measured = min(card * 2**30 / 1e9, cap or float("inf")) >= 0.95 * sized_for * 2**30 / 1e9
    floor = replace(start, update_tokens=0) if measured else None  # a token budget was never measured
    sizes = mem.choose(shape, step, start, fit.budget, set(fit.fixed), floor)
    offer = sizes.update_tokens if "update_tokens" not in fit.fixed else 0
    adopted = bool(offer) and _validated(hw, step)  # set where a run validated it, offered elsewhere
    sizes = replace(sizes, update_tokens=0) if offer and not adopted else sizes  # elsewhere offered, not set
    peaks = mem.phase_peaks(shape, step, sizes)
    unmeasured = floor is None or sizes.update_cells(step.width) > floor.update_cells(step.width)
    if unmeasured and max(peaks.values()) > fit.budget:  # said before Ray starts: memcap would end the run in an OOM
        raise UserError(_refused(fit, user))
    origin = f"{PLANNED_BUDGET} ({usable / 1e9:.1f} GB for the allocator)"
    out = [
        Override(key, hydra_value(getattr(sizes, name)), origin)
        for name, keys in KEYS.items()
        if name not in fit.fixed
        for key in keys
    ]
    out += [
        Override(key, hydra_value(state not in sizes.resident), origin)
        for state, key in STATE_KEYS.items()
        if state not in fit.fixed
    ]
    note, record = _said(sizes, step, peaks, usable, fit.budget)
    return Sized(Part(overrides=out, notes=[note, *_regroup_offer(offer, step, adopted), *_unpriced(tree)]), record)


def _unpriced(tree: Any) -> list[str]:
    """What the run holds that the memory model does not price, said beside the plan: an entropy bonus (verl 0.5.0's
    update then computes the entropy with its gradient, dp_actor.py calculate_entropy: a full-vocabulary softmax of
    each update micro-batch kept for the backward; never measured here, and torch.compile and entropy_checkpointing
    change what it holds)."""
    from omegaconf import OmegaConf

    coeff = OmegaConf.select(tree, ENTROPY_KEY, default=0) if OmegaConf.is_config(tree) else 0
    if not isinstance(coeff, (int, float)) or not coeff:
        return []
    return [
        f"warning: {ENTROPY_KEY}={coeff}: the entropy bonus keeps a full-vocabulary softmax of each update micro-batch "
        "for the backward, which this memory plan does not price; if the update runs out of GPU memory, lower "
        f"{KEYS['update_micro'][0]} (or set the bonus to 0, verl's default)"
    ]


def _validated(hw: Hardware, step: mem.Step) -> bool:
    """Whether the run is one the length-grouped update was validated on: one Pascal GPU (sm below
    VALIDATED_BELOW_SM; no GPU seen: not), a full actor without a critic."""
    pascal = hw.sm is not None and hw.sm < VALIDATED_BELOW_SM
    return pascal and step.world == 1 and not step.critic and not step.lora


def _regroup_offer(tokens: int, step: mem.Step, adopted: bool) -> list[str]:
    """The length-grouped update the memory plan found room for (patches/p40_update.py: every token keeps its weight,
    tests/unit_base/test_update_regroup.py): set where a run validated it (_validated: one Pascal GPU, GRPO without a
    critic, 20 steps, bench/results/p40-path-compact-2026-12-06; its memory estimate corrected with the P40 path's
    measurements: memory.UPDATE_TOKENS_FILL), offered elsewhere (bench/next-device-session.md, issue 67)."""
    if not tokens:
        return []
    keys = KEYS["update_tokens"] if step.critic else KEYS["update_tokens"][:1]
    if adopted:
        off = " ".join(f"{key}=0" for key in keys)
        return [
            f"update: length-grouped micro-batches of {tokens} tokens (the same gradient as verl's micro-batches; "
            f"the update 7 % shorter under the P40 mask); verl's own: --set {off}"
        ]
    sets = " ".join(f"{key}={tokens}" for key in keys)
    return [
        f"update: verl's micro-batches; length-grouped ones of {tokens} tokens fit (the same gradient; set by "
        f"default where a run validated it: one Pascal GPU, no critic): --set {sets}"
    ]


def _fixed_by(user: list[Override], tree: Any, profile: profiles_mod.Profile) -> frozenset[str]:
    """The memory plan's sizes and states that the run's own settings give (or the strategy keeps as measured: the
    run's own strategy, else verl's default, and the profile's; LoRA's fsdp2 is not counted, as before issue 70)."""
    from omegaconf import OmegaConf

    sets = {o.key.lstrip("+") for o in user}
    fixed = {name for name, keys in KEYS.items() if any(k in sets for k in keys)}
    fixed |= {state for state, key in STATE_KEYS.items() if key in sets}
    strategy = OmegaConf.select(tree if STRATEGY_KEY in sets else base_config(), STRATEGY_KEY)
    if (
        strategy != "fsdp"
        or profile.verl.get("actor_rollout_ref", {}).get("actor", {}).get("strategy", "fsdp") != "fsdp"
    ):
        fixed.add("checkpointing")  # measured without it on FSDP1 only: FSDP2 keeps the profile's checkpointing
    return frozenset(fixed)


def _said(sizes: mem.Sizes, step: mem.Step, peaks: dict[str, float], usable: float, budget: float) -> tuple[str, dict]:
    """The memory plan's console line, and what the run record keeps of it."""
    top = max(peaks, key=peaks.get)
    held = [s for s in mem.STATES if step.holds(s)]  # the states the estimate counts
    kept = [STATE_WORDS[s] for s in held if s in sizes.resident]
    offloaded = "the rest offloaded" if held else "the run holds no other states"
    ckpt = "with" if sizes.checkpointing else "without"
    regrouped = f" (length-grouped within {sizes.update_tokens} tokens)" if sizes.update_tokens else ""
    note = (
        f"memory plan for {usable / 1e9:.1f} GB: generation {sizes.generation} sequences at once, update micro-batch "
        f"{sizes.update_micro} {ckpt} gradient checkpointing{regrouped}, log-prob micro-batch {sizes.logprob_micro}; "
        f"on the GPU: {', '.join(kept) if kept else f'weights only ({offloaded})'}; predicted peak "
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


def _refused(fit: Fit, user: list[Override]) -> str:
    """The one line for a card or cap the plan cannot fit, with what would (each checked by the same model): the
    states the profile keeps on the GPU offloaded, the sizes the run's settings fix left to the plan, LoRA, another
    cap or a larger GPU."""
    step, start, fixed, budget = fit.step, fit.start, set(fit.fixed), fit.budget
    sets = {o.key.lstrip("+") for o in user}
    where = f"--gpu-memory-cap-gb {fit.cap:g}" if fit.cap else f"this GPU's {fit.card:.1f} GiB"
    allocator = f"{fit.usable / 1e9:.1f} GB for the allocator"
    within = f"the {budget / 1e9:.1f} GB it plans within ({mem.BUDGET:.0%} of {allocator})"
    least = mem.smallest(start, fixed)
    phase, bytes_ = fit.peak(step, least)
    if bytes_ <= budget:  # the profile keeps states on the GPU that the plan does not take off it
        kept = sorted(start.resident - least.resident - fixed)
        phase, bytes_ = fit.peak(step, replace(least, resident=start.resident))
        offload = " ".join(f"--set {STATE_KEYS[s]}=true" for s in kept)
        return (
            f"{where}: the plan does not fit: its predicted peak is {bytes_ / 1e9:.1f} GB ({phase}) with "
            f"{', '.join(STATE_WORDS[s] for s in kept)} on the GPU, over {within}; what would fit: offload them "
            f"({offload}), or a larger cap"
        )
    ways = []
    if fixed and fit.peak(step, mem.smallest(start, set()))[1] <= budget:
        keys = [k for name in sorted(fixed) for k in (*KEYS.get(name, ()), STATE_KEYS.get(name)) if k]
        ways.append(f"leave {', '.join(k for k in keys if k in sets)} to the memory plan")
    if not step.lora and fit.peak(replace(step, lora=True), least)[1] <= budget:
        ways.append("LoRA (--lora-rank 32: no full gradients nor Adam states)")
    need = math.ceil(fit.peak(step, mem.smallest(start, set()))[1] / mem.BUDGET / 1e8) / 10  # GB the allocator needs
    if fit.cap and need * 1e9 <= fit.card * 2**30 - mem.CONTEXT_BYTES:
        ways.append(f"a cap of {need:.1f} GB or more")
    else:
        ways.append(f"a GPU with {need + mem.CONTEXT_BYTES / 1e9:.1f} GB or more")
    return (
        f"{where}: the plan does not fit: its predicted peak is {bytes_ / 1e9:.1f} GB ({phase}) even at its "
        f"smallest sizes (micro-batches of 1, gradient checkpointing, every state offloaded), over {within}; what "
        f"would fit: {'; '.join(ways)}"
    )
