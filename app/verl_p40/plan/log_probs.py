"""Where the PPO ratio's old log-probs come from: the rollout's own values, or verl's old_log_prob pass.

verl 0.5.0 runs the actor once more over every sampled sequence, before any update of the step, for the log-probs the
ratio divides by (`old_log_probs`, the policy that sampled) and the entropy it logs (`actor/entropy`). The algorithm
does not decide whether the rollout's values can stand in: GRPO (grpo-gsm8k) and PPO with a critic (ppo-gsm8k) read
the same old log-probs (the ratio and its clip; PPO's critic never reads them; a KL in the reward takes them as the
policy's), always of the weights the step sampled with. What decides is whether the rollout computed them as the
pass does: the actor's own weights, fp32, logits / temperature over the whole distribution. verl-p40's decoder for
the HF rollout does (patches/p40_decode.py: they differ from the pass's only in fp32 summation order,
tests/unit_base/test_rollout_log_probs.py); these do not, and keep the pass:
- verl's vLLM rollout: its own copy of the weights and its own kernels (verl itself only compares them:
  training/rollout_probs_diff_*);
- a half-precision rollout or actor (rollout.dtype, the actor's mixed_precision.param_dtype), or TF32 matmuls
  (--tf32, on by default on sm_80+): the two sources round at that precision, each in its own order, far above fp32's
  rounding;
- a LoRA actor, or p40_decode=off: generate() decodes, and returns no log-probs.
`actor_rollout_ref.rollout.p40_log_probs`: auto (the default: the rollout's where they are exact, the pass elsewhere;
validated over 20 steps on the P40 path, bench/results/p40-path-compact-2026-12-06, after the agreement of
speedups-real-2026-12-06), pass (verl's own pass, always) or rollout (the rollout's, refused where they are not
exact).
"""

from __future__ import annotations

from verl_p40 import UserError
from verl_p40.plan.workload import FP32, Workload

KEY = "actor_rollout_ref.rollout.p40_log_probs"
CHOICES = ("auto", "rollout", "pass")


def not_exact(tree, tf32: bool) -> str | None:
    """Why the rollout's log-probs are not the pass's for the settings in `tree` (the plan's config so far) and the
    workers' TF32, or None where they are."""
    from omegaconf import OmegaConf

    get = lambda key: OmegaConf.select(tree, key, default=None)  # noqa: E731
    name = str(get("actor_rollout_ref.rollout.name") or "vllm")
    if name != "hf":
        return f"the {name} rollout samples with its own copy of the weights and kernels"
    if str(get("actor_rollout_ref.rollout.p40_decode") or "off") == "off":
        return "p40_decode=off: transformers' generate() decodes and returns no log-probs"
    run = Workload.of(tree)
    if run.lora:
        return "a LoRA actor decodes with generate(), which returns no log-probs"
    if run.rollout_dtype not in FP32:
        return (
            f"the rollout samples in {run.rollout_dtype}, the pass the update compares with runs in its own precision"
        )
    if run.actor_dtype not in FP32:
        return f"the actor computes in {run.actor_dtype} (fsdp_config.mixed_precision.param_dtype), the rollout in fp32"
    if tf32:
        return "TF32 matmuls (--tf32): the rollout and the pass round at TF32's precision, each in its own order"
    return None


def decide(tree, tf32: bool, user_value: str | None) -> tuple[str, str]:
    """(rollout or pass, the plan's note). `tf32`: the workers' TF32 (steps.tf32_on); `user_value`: the run's own
    setting of KEY, if any."""
    if user_value is not None and user_value not in CHOICES:
        raise UserError(f"--set {KEY}={user_value}: not one of {', '.join(CHOICES)}")
    why = not_exact(tree, tf32)
    off = f"off: --set {KEY}=pass"
    if user_value == "rollout" and why:
        raise UserError(f"--set {KEY}=rollout: {why}; use {KEY}=auto or pass")
    if user_value == "pass":
        return "pass", f"old log-probs: verl's old_log_prob pass ({KEY}=pass, your setting)"
    if why:
        return "pass", f"old log-probs: verl's old_log_prob pass ({why})"
    return "rollout", (
        "old log-probs and actor/entropy: the rollout's own (fp32, the actor's weights, at its temperature): "
        f"verl's old_log_prob pass skipped ({off})"
    )
