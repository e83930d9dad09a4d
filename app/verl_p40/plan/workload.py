"""What a composed run is, in one place: the models it trains and keeps (critic, reference, LoRA), the GPUs it runs
on, the states it keeps in host memory, its advantage estimator, the precision its rollout and actor compute in, and
whether its passes trim the padding and its update may regroup rows by length.

`Workload.of(config)` reads them from verl's config (composed, previewed, or a profile's or recipe's settings as a
nested dict), the way verl 0.5.0 decides them: a critic with the GAE estimator only, a reference model where the KL
goes into the reward or the loss. The memory plan, the disk and host-memory budget, the rules, the run record, the
projection and bench read these facts from here; no other module looks these keys up (tests/test_workload_home.py
checks it). The steps that write the keys into a plan's overrides take their names from `OFFLOAD_KEYS` and `GPUS_KEYS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_p40.patches.verl_050 import REGROUP_LOSS_MODES  # the losses the patch regroups (and why only those)

ESTIMATOR_KEY = "algorithm.adv_estimator"
GPUS_KEYS = ("trainer.n_gpus_per_node", "trainer.nnodes")  # verl's GPUs on each host, and its hosts
KL_KEYS = ("algorithm.use_kl_in_reward", "actor_rollout_ref.actor.use_kl_loss")  # either one needs a reference
ROLLOUT_DTYPE_KEY = "actor_rollout_ref.rollout.dtype"
ACTOR_DTYPE_KEY = "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"
FP32 = ("float32", "fp32")
TRIM_KEY, RMPAD_KEY = "actor_rollout_ref.model.trim_padding", "actor_rollout_ref.model.use_remove_padding"
LOSS_MODE_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"  # verl's policy loss (core_algos.py); vanilla: PPO's
AGG_KEY, DYNAMIC_KEY = "actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.actor.use_dynamic_bsz"
FUSED_KEY = "actor_rollout_ref.model.use_fused_kernels"  # verl's fused kernels: the patch's actor then never trims
# the actor's regrouped update budget (patches/p40_update.py): the memory plan sizes it, the rules refuse it ignored
UPDATE_TOKENS_KEY = "actor_rollout_ref.actor.p40_update_tokens"
PLANNED_BUDGET = "memory plan"  # how the origin of the memory plan's own sizes begins (the rules leave them be)
OFFLOAD_KEYS = {  # a state of the run -> the verl key that keeps it in host memory between the phases using it
    "actor_params": "actor_rollout_ref.actor.fsdp_config.param_offload",
    "actor_optimizer": "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    "reference_params": "actor_rollout_ref.ref.fsdp_config.param_offload",
    "critic_params": "critic.model.fsdp_config.param_offload",
    "critic_optimizer": "critic.model.fsdp_config.optimizer_offload",
}


@dataclass(frozen=True)
class Workload:
    """The facts of one run that several stages read. The numbers are kept as the config holds them and converted
    where asked for (`gpus`, `samples`, `lora`), so a value verl would refuse is named by the rules, not here."""

    estimator: str  # verl's algorithm.adv_estimator (gae, grpo, ...)
    reference: bool  # a reference model: KL in the reward or in the actor's loss
    offloaded: frozenset[str]  # of OFFLOAD_KEYS: the states kept in host memory
    gpus_per_node: Any
    nodes: Any
    samples_per_prompt: Any  # actor_rollout_ref.rollout.n
    lora_rank: Any
    rollout_dtype: str = "bfloat16"  # actor_rollout_ref.rollout.dtype (verl's default)
    actor_dtype: str = "bf16"  # the actor's FSDP mixed_precision.param_dtype (verl's default)
    trims: bool = False  # the passes run on the columns some row uses (model.trim_padding, where rmpad is off)
    # the first setting, in the patch's order, that keeps verl's micro-batches in the actor's update (None: the update
    # may run length-grouped micro-batches, patches/p40_update.py); the rules name it where a budget would be ignored
    keeps_micro_batches: str | None = TRIM_KEY
    loss_mode: str = "vanilla"  # the actor's policy loss (LOSS_MODE_KEY)

    @classmethod
    def of(cls, config: Any) -> Workload:
        """The workload of `config`: an OmegaConf config or a nested dict of verl's keys (verl's defaults where a
        key is missing)."""
        from omegaconf import OmegaConf

        tree = config if OmegaConf.is_config(config) else OmegaConf.create(config or {})
        get = lambda key, default=None: OmegaConf.select(tree, key, default=default)  # noqa: E731
        # as verl_050.py's patch decides them in the workers: trim_padding yields to use_remove_padding (and, for the
        # actor, to use_fused_kernels: a verl option no profile or recipe sets), and only token-mean's loss, without
        # verl's dynamic batches, is regrouped by length, for the policy losses where that is exact
        trims = bool(get(TRIM_KEY, False)) and not get(RMPAD_KEY, False)
        loss_mode = str(get(LOSS_MODE_KEY) or "vanilla")
        keeps = (  # (key, whether it keeps verl's micro-batches)
            (RMPAD_KEY, get(RMPAD_KEY, False)),
            (TRIM_KEY, not get(TRIM_KEY, False)),
            (FUSED_KEY, get(FUSED_KEY, False)),
            (LOSS_MODE_KEY, loss_mode not in REGROUP_LOSS_MODES),
            (AGG_KEY, get(AGG_KEY, "token-mean") != "token-mean"),
            (DYNAMIC_KEY, get(DYNAMIC_KEY, False)),
        )
        return cls(
            estimator=str(get(ESTIMATOR_KEY, "gae")),
            reference=bool(get(KL_KEYS[0], False) or get(KL_KEYS[1], False)),
            offloaded=frozenset(state for state, key in OFFLOAD_KEYS.items() if get(key, False) is True),
            gpus_per_node=get(GPUS_KEYS[0], 1),
            nodes=get(GPUS_KEYS[1], 1),
            samples_per_prompt=get("actor_rollout_ref.rollout.n", 1),
            lora_rank=get("actor_rollout_ref.model.lora_rank", 0),
            rollout_dtype=str(get(ROLLOUT_DTYPE_KEY) or "bfloat16"),
            actor_dtype=str(get(ACTOR_DTYPE_KEY) or "bf16"),
            trims=trims,
            keeps_micro_batches=next((key for key, kept in keeps if kept), None),
            loss_mode=loss_mode,
        )

    @property
    def regroups(self) -> bool:
        """Whether the actor's update may run length-grouped micro-batches (patches/p40_update.py)."""
        return self.keeps_micro_batches is None

    @property
    def critic(self) -> bool:
        """verl 0.5.0 trains a critic for the GAE estimator only."""
        return self.estimator == "gae"

    @property
    def gpus(self) -> int:
        """The GPUs of all hosts (verl's world size)."""
        return int(self.gpus_per_node) * int(self.nodes)

    @property
    def samples(self) -> int:
        return int(self.samples_per_prompt)

    @property
    def lora(self) -> bool:
        return int(self.lora_rank or 0) > 0

    def on_host(self, state: str) -> bool:
        """Whether `state` (a key of OFFLOAD_KEYS) is kept in host memory between the phases that use it."""
        return state in self.offloaded
