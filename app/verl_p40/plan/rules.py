"""The values verl 0.5.0 would refuse minutes later inside a Ray worker, checked before anything starts: types against
verl's own defaults, the names verl knows, positive sizes, and the batch divisibility rules its trainer and workers
assert. One set of rules: GRPO (rollout n) and multi-GPU layouts (GPU count, nodes) are part of the same arithmetic.
Every error names where the offending value came from (a profile file or `--set`), as unknown keys do.
"""

from __future__ import annotations

import math
from typing import Any

from verl_p40 import VERL_VERSION, UserError, reward
from verl_p40.plan.workload import (
    AGG_KEY,
    DYNAMIC_KEY,
    ESTIMATOR_KEY,
    FUSED_KEY,
    GPUS_KEYS,
    LOSS_MODE_KEY,
    PLANNED_BUDGET,
    REGROUP_LOSS_MODES,
    RMPAD_KEY,
    TRIM_KEY,
    UPDATE_TOKENS_KEY,
    Workload,
)

# Names verl 0.5.0 accepts (verl/trainer/ppo/core_algos.py AdvantageEstimator; the rollout and strategy switches).
CHOICES = {
    "actor_rollout_ref.rollout.name": ("hf", "vllm", "sglang"),
    ESTIMATOR_KEY: (
        "gae",
        "grpo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "rloo",
        "opo",
        "grpo_passk",
    ),
    "actor_rollout_ref.actor.strategy": ("fsdp", "fsdp2", "megatron"),
    "actor_rollout_ref.ref.strategy": ("fsdp", "fsdp2", "megatron"),
    "critic.strategy": ("fsdp", "fsdp2", "megatron"),
    "actor_rollout_ref.actor.loss_agg_mode": (
        "token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ),
    "actor_rollout_ref.rollout.dtype": ("float32", "fp32", "float16", "fp16", "half", "bfloat16", "bf16"),
    "actor_rollout_ref.rollout.p40_decode": ("auto", "graph", "eager", "off"),  # patches/p40_decode.py
    "actor_rollout_ref.rollout.p40_decode_compact": (True, False),  # patches/p40_decode.py
    "actor_rollout_ref.rollout.p40_log_probs": ("auto", "rollout", "pass"),  # plan/log_probs.py
}
# Real-valued settings that verl 0.5.0's YAML writes as a whole number (0, 1): a float is what they hold.
REAL_WITH_INT_DEFAULT = (
    "actor_rollout_ref.actor.entropy_coeff",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.val_kwargs.temperature",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.val_kwargs.top_p",
)
POSITIVE = (
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
    "critic.ppo_mini_batch_size",
    *GPUS_KEYS,
    "actor_rollout_ref.actor.ppo_epochs",
    "trainer.total_epochs",  # 0: verl starts, loads every model, and trains nothing
)


# Whole numbers whose verl default is null (unset): a value set must be a whole number, or null.
WHOLE_OR_NULL = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
    "data.val_batch_size",
    "trainer.total_training_steps",
    "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep",
)
# verl-p40's own counts (not in verl's config, so no default to type them by): a whole number, 1 or more, where set.
OWN_COUNTS = ("actor_rollout_ref.rollout.p40_prefill_groups",)  # patches/p40_decode.py
# What PyTorch's optimizers refuse below zero (when the trainer builds them, minutes in).
NON_NEGATIVE = (
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.optim.weight_decay",
    "critic.optim.lr",
    "critic.optim.weight_decay",
)
REWARD_METHOD = "custom_reward_function.reward_kwargs.method"
FORMAT_BONUS = "custom_reward_function.reward_kwargs.format_bonus"


def _get(cfg: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=None)


def _where(key: str, origins: dict[str, str]) -> str:
    if key == "critic.ppo_mini_batch_size" and key not in origins:  # verl's default follows the actor's
        return _where("actor_rollout_ref.actor.ppo_mini_batch_size", origins)
    return origins.get(key, f"verl {VERL_VERSION}'s default")


def _all_where(keys: list[str], origins: dict[str, str]) -> str:
    """The origins of the values a rule combines, user settings first."""
    found = list(dict.fromkeys(_where(k, origins) for k in keys))
    return ", ".join(sorted(found, key=lambda o: not o.startswith("--set")))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def type_problems(cfg: Any, base: Any, origins: dict[str, str]) -> list[str]:
    problems = []
    for key in origins:
        default, value = _get(base, key), _get(cfg, key)
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{origins[key]}: {key} must be a finite number, got {value!r}")
            continue
        if default is None and key in WHOLE_OR_NULL and value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                problems.append(f"{origins[key]}: {key} must be a whole number or null, got {value!r}")
            continue
        if default is None or value is None or isinstance(default, (str, list, dict)) or hasattr(default, "keys"):
            continue
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, float) or key in REAL_WITH_INT_DEFAULT:
            ok = _is_number(value)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            problems.append(
                f"{origins[key]}: {key} must be {type(default).__name__} like verl's default "
                f"({default!r}), got {value!r}"
            )
    return problems


def check(cfg: Any, base: Any, origins: dict[str, str]) -> None:
    """Raise one UserError listing every problem of composed config `cfg` (verl's defaults: `base`); `origins` maps
    each key that was set to where it was set."""
    problems = type_problems(cfg, base, origins)
    for key, allowed in CHOICES.items():
        value = _get(cfg, key)
        switch = isinstance(allowed[0], bool)  # true or false, not 1 or 0 (which Python counts as equal to them)
        if value is not None and (value not in allowed or switch and not isinstance(value, bool)):
            named = ", ".join(str(a).lower() if isinstance(a, bool) else a for a in allowed)
            problems.append(f"{_where(key, origins)}: {key}={value!r} is not one of {named}")
    for key in POSITIVE:
        value = _get(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            problems.append(f"{_where(key, origins)}: {key} must be at least 1, got {value}")
    for key in OWN_COUNTS:
        value = _get(cfg, key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            problems.append(f"{_where(key, origins)}: {key} must be a whole number, 1 or more, got {value!r}")
    for key in NON_NEGATIVE:
        value = _get(cfg, key)
        if _is_number(value) and value < 0:
            problems.append(f"{_where(key, origins)}: {key} must be at least 0, got {value}")
    problems += _reward_problems(cfg, origins) + _regroup_problems(cfg, origins)
    if problems:  # the arithmetic below needs sane numbers
        raise UserError("; ".join(problems))
    run = Workload.of(cfg)
    batch, n, gpus = int(_get(cfg, "data.train_batch_size")), run.samples, run.gpus
    sequences = batch * n
    layout = f"data.train_batch_size {batch} x rollout.n {n} = {sequences} sequences on {gpus} GPU(s)"
    if sequences % gpus:
        keys = ["data.train_batch_size", "actor_rollout_ref.rollout.n", *GPUS_KEYS]
        counts = [str(g) for g in range(1, 9) if sequences % g == 0]
        problems.append(
            f"{_all_where(keys, origins)}: {layout}: the sequences must divide evenly over the GPUs; train on "
            f"{', '.join(counts)} GPUs (--gpus; with compose GPUS= in .env), or --batch per-gpu (BATCH=per-gpu), or "
            f"set data.train_batch_size to a multiple of {gpus // math.gcd(gpus, n)}"
        )
    for role in ("actor_rollout_ref.actor", *(("critic",) if run.critic else ())):
        problems += _mini_batch_problems(cfg, origins, role, batch, run)
    if problems:
        raise UserError("; ".join(problems))


def _mini_batch_problems(cfg: Any, origins: dict[str, str], role: str, batch: int, run: Workload) -> list[str]:
    """What verl 0.5.0 does with the mini-batch of `role` (the actor's, the critic's): refuses one larger than the batch
    (ray_trainer.py, without dynamic batches); normalises it per data-parallel rank as ppo_mini_batch_size x
    rollout.n // (GPUs // ulysses_sequence_parallel_size) (fsdp_workers.py, dynamic batches or not), so sequences that
    do not divide over the ranks silently make smaller mini-batches (more optimizer steps a step); and asserts that the
    micro-batch divides what each rank gets."""
    n, gpus = run.samples, run.gpus // int(_get(cfg, f"{role}.ulysses_sequence_parallel_size") or 1)
    mini_key, micro_key = f"{role}.ppo_mini_batch_size", f"{role}.ppo_micro_batch_size_per_gpu"
    mini, micro, dynamic = _get(cfg, mini_key), _get(cfg, micro_key), _get(cfg, f"{role}.use_dynamic_bsz")
    if mini is None:
        return []
    if not dynamic and mini > batch:
        return [f"{_where(mini_key, origins)}: {mini_key} {mini} is larger than data.train_batch_size {batch}"]
    per_gpu = mini * n // gpus  # what verl's workers compute: mini-batch x n over the data-parallel GPUs
    if mini * n % gpus:
        keys, multiple = [mini_key, "actor_rollout_ref.rollout.n", *GPUS_KEYS], gpus // math.gcd(gpus, n)
        return [
            f"{_all_where(keys, origins)}: {mini_key} {mini} x rollout.n {n} = {mini * n} sequences do not divide "
            f"over {gpus} GPUs (verl {VERL_VERSION} takes {mini * n} // {gpus} = {per_gpu} a GPU, {per_gpu * gpus} a "
            f"mini-batch, not {mini * n}); set {mini_key} to a multiple of {multiple} (e.g. "
            f"{max(multiple, mini - mini % multiple)})"
        ]
    if dynamic or micro is None or per_gpu % micro == 0:
        return []
    keys = [mini_key, micro_key, "actor_rollout_ref.rollout.n", *GPUS_KEYS]
    return [
        f"{_all_where(keys, origins)}: {mini_key} {mini} x rollout.n {n} over {gpus} GPU(s) = {per_gpu} sequences "
        f"per GPU, which {micro_key} {micro} does not divide; set {micro_key} to a divisor of {per_gpu} or train on "
        "fewer GPUs"
    ]


def _regroup_problems(cfg: Any, origins: dict[str, str]) -> list[str]:
    """A token budget for the actor's update (patches/p40_update.py) that the run set itself (`--set`, or a profile or
    recipe of its own) where the patch keeps verl's micro-batches (`Workload.keeps_micro_batches` names the setting,
    as the patch decides in the workers): the setting would silently do nothing it says. The budget the memory plan
    set is the plan's own (it offers one only where the update regroups)."""
    tokens = _get(cfg, UPDATE_TOKENS_KEY)
    if not _is_number(tokens) or tokens <= 0 or origins.get(UPDATE_TOKENS_KEY, "").startswith(PLANNED_BUDGET):
        return []
    run = Workload.of(cfg)
    if run.regroups:
        return []
    key = run.keeps_micro_batches
    why, fix = _KEEPS_MICRO_BATCHES[key]
    if key == LOSS_MODE_KEY:
        why = why.format(mode=run.loss_mode)
    value = _get(cfg, key)
    value = "unset" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return [
        f"{_all_where([UPDATE_TOKENS_KEY, key], origins)}: {UPDATE_TOKENS_KEY}={tokens} is ignored where {key}={value} "
        f"({why}): {fix}, or leave {UPDATE_TOKENS_KEY} unset"
    ]


# each setting that keeps verl's micro-batches in the actor's update (Workload.keeps_micro_batches) -> (why, the fix)
_KEEPS_MICRO_BATCHES = {
    RMPAD_KEY: ("trimming yields to verl's padding removal", f"set {RMPAD_KEY}=false"),
    TRIM_KEY: ("only trimmed rows are regrouped by length", f"set {TRIM_KEY}=true"),
    FUSED_KEY: ("the actor does not trim with verl's fused kernels", f"set {FUSED_KEY}=false"),
    LOSS_MODE_KEY: (
        f"the update regroups only the policy losses {', '.join(REGROUP_LOSS_MODES)}; {{mode}} chooses tokens per "
        "micro-batch, so regrouped rows would change its gradient",
        f"use {' or '.join(REGROUP_LOSS_MODES)}",
    ),
    AGG_KEY: ("only token-mean's token weights survive regrouping", f"set {AGG_KEY}=token-mean"),
    DYNAMIC_KEY: ("verl's dynamic batches replace the micro-batches", f"set {DYNAMIC_KEY}=false"),
}


def _reward_problems(cfg: Any, origins: dict[str, str]) -> list[str]:
    """verl-p40's reward settings (custom_reward_function.reward_kwargs), which verl passes on unread."""
    problems = []
    method, bonus = _get(cfg, REWARD_METHOD), _get(cfg, FORMAT_BONUS)
    if method is not None and method not in reward.METHODS:
        problems.append(
            f"{_where(REWARD_METHOD, origins)}: reward method {method!r} must be one of {', '.join(reward.METHODS)}"
        )
    if bonus is not None and (not _is_number(bonus) or bonus < 0):  # not finite: a type problem
        problems.append(
            f"{_where(FORMAT_BONUS, origins)}: {FORMAT_BONUS} must be a finite number of at least 0, got {bonus!r}"
        )
    return problems
