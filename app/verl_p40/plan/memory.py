"""GPU memory of one training step, phase by phase, and the sizes that fit a card: how many sequences generation takes
at once, the log-prob and update micro-batches, gradient checkpointing, and which states stay on the GPU.

The model counts the large terms in fp32 (4 bytes a value), for the widest sequences a step can have (the longest
prompt plus the longest answer, `data.max_prompt_length + data.max_response_length`):
- states: the actor's weights (4 bytes a parameter), its gradients (4) and Adam states (8) during its update, the
  reference's weights (4) and the critic's (16 in all with its update); offloaded states are on the GPU only in the
  phase that uses them (verl loads an offloaded optimizer for the whole update). FSDP shards every state W ways.
- a micro-batch's logits (micro x width x vocab x 4 bytes): UPDATE_LOGIT_COPIES of them in an actor update (the
  logits, their log-softmax, the gradient, the saved tensors of the loss), LOGPROB_LOGIT_COPIES in a log-prob pass
  (the logits and the entropy's softmax). In a length-grouped update (`update_tokens`, rows x trimmed columns) the
  logits are the kept answer columns and one more a row (patches/p40_trim.py computes the log-probs of those and
  pads the results, not the logits), so they are priced per token and per row: the budget's cells, or fewer where
  the rows a micro-batch can hold (`update_rows`) cannot fill them, and each row's answer-wide tensors
  (ROW_VALUES a column: log-probs, old and reference ones, advantages, masks, weights, entropy, gradients);
  a token budget is priced UPDATE_TOKENS_FILL times the per-token terms (it is filled: measured on the P40 path);
- activations kept for the backward: one hidden state a layer with gradient checkpointing, every saved tensor of a
  layer without it (ACTIVATION_VALUES per token and layer);
- generation: the KV cache of the longest answers for the whole chunk, one layer's prefill intermediates, and on
  several GPUs the actor's weights unsharded whole (the rollout's decoder gathers them once: patches/p40_decode.py).
Calibrated on two measured runs of the grpo-gsm8k recipe on the H200 (torch's `max_memory_allocated`, steady steps):
the p40 plan (update micro-batch 4, Adam offloaded: 14.2 GiB) and the fast plan (micro-batch 16, nothing offloaded:
35.3 GiB; its first step, before Adam had states, 31.6 GiB, which the fit predicts within 0.1 GB). Sizes are chosen
so that the predicted peak stays within BUDGET of what the allocator may use (the cap, else the card less the CUDA
context), because memcap turns a prediction that is too large into an out-of-memory error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FP32 = 4
UPDATE_LOGIT_COPIES = 4.17  # fitted: (37.9 GB - 9.9 GB states) at 16 x 680 logits vs (15.25 - 7.9) at 4 x 680
LOGPROB_LOGIT_COPIES = 2.2  # the fast plan's peak bounds it: 16 states + 2.2 x 32 x 680 logits <= 37.9 GB
FIXED_BYTES = 0.47e9  # the same fit's intercept: CUDA workspaces, the loss's small tensors
CONTEXT_BYTES = 1.0e9  # the CUDA context and NCCL buffers, outside the allocator (seen 0.6-1 GB)
BUDGET = 0.8  # of what the allocator may use: fragmentation, and the model's error on other shapes
MAX_UPDATE_MICRO = 16  # sequences a micro-batch: past these an H200 is no faster (bench fast mode: 16 and 32)
MAX_LOGPROB_MICRO = 32
TOKEN_STEP = 256  # the grain of a regrouped update's token budget
ROW_VALUES = 12  # fp32 values a row of an update micro-batch holds per answer column beside its logits
# A length-grouped micro-batch fills its token budget (rows packed by length: patches/p40_update.py token_groups),
# where the constants above were fitted on verl's micro-batches, priced at full width but holding rows of whatever
# length they have. Measured against the model at 2,048 tokens on the P40 path (update_actor, torch's peak), the
# per-token part (logits and activations) was 1.067x the model's with every answer at the limit (19.49 GB against
# 18.79: timing-pair-2026-12-06) and 1.126x with real answers (20.10 GB against 18.79: speedups-real-2026-12-06); at
# 1,792 tokens with real answers 1.237x (19.65 GB against 18.68 at 1.13: p40-path-compact-2026-12-06, 20 steps).
UPDATE_TOKENS_FILL = 1.24  # the largest, rounded up; measured on the actor, priced the same on the critic


def activation_values(hidden: int, intermediate: int, kv_dim: int) -> int:
    """fp32 values a decoder layer saves for its backward, per token: the norms' inputs, q/k/v and their rotated
    copies, the attention output and its projection, the MLP's gate, up, activation and product."""
    return 10 * hidden + 4 * intermediate + 2 * kv_dim


@dataclass(frozen=True)
class Shape:
    """The model's dimensions (from its config.json)."""

    hidden: int
    layers: int
    kv_dim: int
    vocab: int
    intermediate: int
    block_parameters: int  # the transformer blocks' matmul parameters
    parameters: int  # all parameters

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Shape:
        from verl_p40.plan.budget import parameter_count

        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or hidden // heads)
        kv_dim = int(config.get("num_key_value_heads") or heads) * head_dim
        block = layers * (
            2 * hidden * heads * head_dim + 2 * hidden * kv_dim + 3 * hidden * int(config["intermediate_size"])
        )
        vocab, inter = int(config["vocab_size"]), int(config["intermediate_size"])
        return cls(hidden, layers, kv_dim, vocab, inter, block, parameter_count(config))

    @classmethod
    def of_folder(cls, folder: str | Path) -> Shape:
        return cls.from_config(json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")))


# Qwen2.5-0.5B-Instruct's shape: the plan's model when its folder cannot be read here (a config made elsewhere)
QWEN_05B = Shape(896, 24, 128, 151936, 4864, 357_826_560, 494_032_768)


@dataclass(frozen=True)
class Sizes:
    """What the memory plan chooses (sequences per GPU), and the states it keeps on the GPU."""

    generation: int
    update_micro: int
    logprob_micro: int
    checkpointing: bool  # gradient checkpointing of the actor (and critic)
    resident: frozenset[str]  # of STATES: kept on the GPU between the phases that use them
    # rows x columns of a length-grouped update micro-batch (patches/p40_update.py); 0: update_micro full-width rows
    update_tokens: int = 0

    def update_cells(self, width: int) -> int:
        """Rows x columns an update micro-batch holds at most."""
        return self.update_tokens or self.update_micro * width


@dataclass(frozen=True)
class Step:
    """One GPU's share of a step: sequences, widths, what the algorithm runs."""

    sequences: int
    prompt_width: int
    response_width: int
    critic: bool
    reference: bool
    lora: bool
    world: int = 1
    mini_batch: int = 0  # sequences of an update's mini-batch on this GPU (its micro-batch must divide it)
    regrouped: bool = False  # the update may run length-grouped micro-batches within a token budget (trimming on)

    @property
    def width(self) -> int:
        return self.prompt_width + self.response_width

    def holds(self, state: str) -> bool:
        """Whether the run has `state` (of STATES) at all, on the GPU or off it: Adam states with full training only,
        reference weights where a KL term needs them and the actor is not LoRA's (LoRA's reference is the actor with
        its adapter off), the critic's for GAE. The estimate (`phase_peaks`) and the memory plan's note read it."""
        held = {
            "actor_optimizer": not self.lora,
            "reference_params": self.reference and not self.lora,
            "critic_params": self.critic,
            "critic_optimizer": self.critic,
        }
        return held[state]


def update_rows(step: Step, sizes: Sizes) -> int:
    """The most rows an update micro-batch holds: verl's micro-batch, or in a length-grouped one as many as its token
    budget takes at one prompt and one answer column a row, at most a mini-batch."""
    if not sizes.update_tokens:
        return sizes.update_micro
    return max(1, min(step.mini_batch or step.sequences, sizes.update_tokens // 2))


def update_logit_cells(step: Step, sizes: Sizes) -> int:
    """Rows x columns of an update micro-batch's logits: verl's micro-batch at full width (as calibrated), or in a
    length-grouped one each row's kept answer columns and one more (p40_trim.py): within the token budget, as every
    row also has a prompt column, and within the rows it can hold at the widest answer."""
    if not sizes.update_tokens:
        return sizes.update_micro * step.width
    return min(sizes.update_tokens, update_rows(step, sizes) * (step.response_width + 1))


STATES = ("actor_optimizer", "reference_params", "critic_params", "critic_optimizer")
UPDATES = ("update_actor", "update_critic")
PASSES = ("old_log_prob", "ref", "values")


def _state_bytes(shape: Shape, step: Step) -> dict[str, float]:
    p, w = shape.parameters, step.world
    return {
        "actor_weights": FP32 * p / w,
        "actor_grads": 0.0 if step.lora else FP32 * p / w,
        "actor_optimizer": 2 * FP32 * p / w if step.holds("actor_optimizer") else 0.0,
        "reference_params": FP32 * p / w if step.holds("reference_params") else 0.0,
        "critic_params": 2 * FP32 * p / w if step.holds("critic_params") else 0.0,  # weights and gradients
        "critic_optimizer": 2 * FP32 * p / w if step.holds("critic_optimizer") else 0.0,
    }


def phase_peaks(shape: Shape, step: Step, sizes: Sizes) -> dict[str, float]:
    """Predicted bytes the allocator holds at the peak of each phase of a step."""
    states = _state_bytes(shape, step)
    kept = states["actor_weights"] + sum(states[s] for s in sizes.resident)
    with_ = lambda *names: kept + sum(states[n] for n in names if n not in sizes.resident)  # noqa: E731
    logits = lambda micro: micro * step.width * shape.vocab * FP32  # noqa: E731
    update_cells = sizes.update_cells(step.width)
    # what a backward without checkpointing keeps beyond what the calibrated copies already hold (the runs that
    # calibrated them checkpointed: one hidden state a layer, and one layer's tensors while it is recomputed)
    every = activation_values(shape.hidden, shape.intermediate, shape.kv_dim) * shape.layers
    checkpointed = shape.layers * shape.hidden + activation_values(shape.hidden, shape.intermediate, shape.kv_dim)
    per_token = 0 if sizes.checkpointing else (every - checkpointed) * FP32
    fill = UPDATE_TOKENS_FILL if sizes.update_tokens else 1.0
    chunk = sizes.generation
    kv_cache = chunk * step.width * shape.layers * 2 * shape.kv_dim * FP32
    prefill = chunk * step.prompt_width * (3 * shape.intermediate + 4 * shape.hidden) * FP32
    unsharded = FP32 * shape.parameters - states["actor_weights"]  # the other GPUs' shards, while decoding
    peaks = {
        "generation": kept + kv_cache + prefill + 3 * chunk * shape.vocab * FP32 + FIXED_BYTES + unsharded,
        "old_log_prob": kept + LOGPROB_LOGIT_COPIES * logits(sizes.logprob_micro) + FIXED_BYTES,
        "update_actor": with_("actor_grads", "actor_optimizer")
        + fill * (UPDATE_LOGIT_COPIES * update_logit_cells(step, sizes) * shape.vocab * FP32 + update_cells * per_token)
        + (update_rows(step, sizes) * step.response_width * ROW_VALUES * FP32 if sizes.update_tokens else 0)
        + FIXED_BYTES,
    }
    if step.reference:
        peaks["ref"] = with_("reference_params") + LOGPROB_LOGIT_COPIES * logits(sizes.logprob_micro) + FIXED_BYTES
    if step.critic:  # a value head: no vocabulary-wide logits
        transient = sizes.logprob_micro * step.width * (2 * shape.hidden + 3 * shape.intermediate) * FP32  # no grad
        peaks["values"] = with_("critic_params") + transient + FIXED_BYTES
        kept_for_backward = fill * checkpointed * FP32 * update_cells  # the critic keeps checkpointing
        peaks["update_critic"] = with_("critic_params", "critic_optimizer") + kept_for_backward + FIXED_BYTES
    return peaks


def usable_bytes(card_gib: float, cap_gb: float | None) -> float:
    """What the caching allocator may hold: the cap (memcap caps the allocator itself), else the card less the CUDA
    context."""
    card = card_gib * 2**30 - CONTEXT_BYTES
    return min(card, cap_gb * 1e9) if cap_gb else card


def smallest(start: Sizes, fixed: set[str]) -> Sizes:
    """The least memory a plan can take: every size the run's settings do not give at its smallest, gradient
    checkpointing on, and every state they do not keep on the GPU offloaded."""
    return Sizes(
        generation=start.generation if "generation" in fixed else 1,
        update_micro=start.update_micro if "update_micro" in fixed else 1,
        logprob_micro=start.logprob_micro if "logprob_micro" in fixed else 1,
        checkpointing=start.checkpointing if "checkpointing" in fixed else True,
        resident=frozenset(s for s in start.resident if s in fixed),
        update_tokens=start.update_tokens if "update_tokens" in fixed else 0,
    )


def _powers(low: int, high: int) -> list[int]:
    """Powers of two from `low` up to `high`, largest first (the sizes a micro-batch may take)."""
    out, n = [], 1
    while n <= high:
        if n >= low:
            out.append(n)
        n *= 2
    return sorted(out, reverse=True)


def update_tokens(sizes: Sizes, step: Step, fits) -> int:
    """The largest token budget of a length-grouped update micro-batch that fits the update phases (multiples of
    TOKEN_STEP, up to MAX_UPDATE_MICRO rows at full width), and never less than the chosen sequences at full width
    (fewer tokens than verl's own micro-batch would cut its rows finer); 0 where none fits: a budget is filled by rows
    packed by length, so even verl's full-width box holds more as a budget than as verl's micro-batch
    (UPDATE_TOKENS_FILL)."""
    from dataclasses import replace

    least = sizes.update_micro * step.width
    for tokens in [*range(MAX_UPDATE_MICRO * step.width // TOKEN_STEP * TOKEN_STEP, least, -TOKEN_STEP), least]:
        if fits(replace(sizes, update_tokens=tokens), UPDATES):
            return tokens
    return 0


def choose(shape: Shape, step: Step, start: Sizes, budget: float, fixed: set[str], floor: Sizes | None = None) -> Sizes:
    """The sizes for `budget` bytes, greedily in the order that buys the most speed per byte: generation in as few
    chunks as fit, the actor update without gradient checkpointing (a quarter fewer FLOPs) at the largest
    micro-batch that allows, states on the GPU, larger log-prob micro-batches, then the token budget of a
    length-grouped update in what is left. `start` is the profile's plan
    (its values where `fixed` names them: the user set them); a size that does not fit shrinks until it does, but
    never below `floor` (the profile's own sizes, measured to fit a card of this size)."""
    from dataclasses import replace

    def dominated(s: Sizes, phases: tuple[str, ...]) -> bool:
        """No larger than the measured plan in what these phases hold: they fit as that plan's did."""
        if floor is None or not s.resident <= floor.resident:
            return False
        cells = s.update_cells(step.width) <= floor.update_cells(step.width)
        update = s.update_micro <= floor.update_micro and cells and (s.checkpointing or not floor.checkpointing)
        checks = {"generation": s.generation <= floor.generation, "update": update}
        checks["pass"] = s.logprob_micro <= floor.logprob_micro
        kind = lambda p: "generation" if p == "generation" else "update" if p in UPDATES else "pass"  # noqa: E731
        return all(checks[kind(p)] for p in phases or ("generation", *UPDATES, *PASSES))

    def fits(s: Sizes, phases: tuple[str, ...] = ()) -> bool:
        peaks = phase_peaks(shape, step, s)
        return dominated(s, phases) or max(v for k, v in peaks.items() if not phases or k in phases) <= budget

    sizes = start
    if "generation" not in fixed:
        for chunk in [step.sequences] + _powers(1, step.sequences - 1):
            if fits(replace(sizes, generation=chunk), ("generation",)):
                sizes = replace(sizes, generation=chunk)
                break
    if "update_micro" not in fixed:
        mini = step.mini_batch or step.sequences
        micros = [m for m in _powers(1, min(MAX_UPDATE_MICRO, mini)) if mini % m == 0]
        # without checkpointing only at 2 or more a micro-batch: one sequence at a time costs more in launches
        ways = [] if "checkpointing" in fixed else [(False, m) for m in micros if m >= 2]
        ways += [(True if "checkpointing" not in fixed else sizes.checkpointing, m) for m in micros]
        for ckpt, micro in ways:  # at full width, token budget or not: the micro-batch weighs the loss's tokens
            trial = replace(sizes, checkpointing=ckpt, update_micro=micro)
            if fits(replace(trial, update_tokens=0), UPDATES):
                sizes = trial
                break
    elif "checkpointing" not in fixed and sizes.update_micro >= 2:
        if fits(replace(sizes, checkpointing=False), UPDATES):
            sizes = replace(sizes, checkpointing=False)
    if "update_tokens" in fixed and "checkpointing" not in fixed and not fits(sizes, UPDATES):
        sizes = replace(sizes, checkpointing=True)  # the run's own token budget: recomputed rather than refused
    for state in STATES:
        if state not in fixed and state not in sizes.resident:
            trial = replace(sizes, resident=sizes.resident | {state})
            if fits(trial):
                sizes = trial
    if "logprob_micro" not in fixed:
        for micro in _powers(1, min(MAX_LOGPROB_MICRO, step.sequences)):
            if fits(replace(sizes, logprob_micro=micro), PASSES):
                sizes = replace(sizes, logprob_micro=micro)
                break
    if "update_tokens" not in fixed:  # last: the memory the other choices leave, so they stay as without it
        sizes = replace(sizes, update_tokens=update_tokens(sizes, step, fits) if step.regrouped else 0)
    return sizes
