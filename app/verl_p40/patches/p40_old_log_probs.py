# Installed into verl by verl-p40's patch set as verl/utils/p40_old_log_probs.py.
"""The old log-probs from the rollout, in place of verl's old_log_prob pass (`actor_rollout_ref.rollout.p40_log_probs`).

verl 0.5.0's trainer runs the actor once more over every sampled sequence (`compute_log_prob`) for the log-probs the
PPO ratio divides by (`old_log_probs`) and the entropy it logs (`actor/entropy`). With the HF rollout and verl-p40's
decoder (p40_decode.py) the rollout has already computed those very numbers: the same weights (the actor's own,
unsharded, before any update of the step), fp32, logits / rollout.temperature and the whole distribution's
log-softmax. They differ from the pass's only in the order of fp32 sums (a token at a time against the whole
sequence at once; tests/unit_base/test_rollout_log_probs.py, bench/results/rollout-log-probs-2026-12-05).

`p40_log_probs=rollout` (the plan's choice where that holds: plan/log_probs.py) makes the trainer take them; any batch
without them (a rollout that decoded with generate(), a LoRA actor) still gets verl's pass, said once. So does a batch
whose log-probs were computed at another temperature than rollout.temperature, the one verl's pass and the update
divide the logits by (verl 0.5.0 never changes it between the two; the rollout records its own with the log-probs,
p40_decode.TEMPERATURE_KEY, so that a later change cannot go unseen). `pass` is verl's own behaviour.
"""

from __future__ import annotations

_said: set[str] = set()
TEMPERATURE_KEY = "rollout_log_probs_temperature"  # p40_decode.TEMPERATURE_KEY (this file is installed on its own)


def _say_once(text: str) -> None:
    if text not in _said:
        _said.add(text)
        print(f"[verl-p40] old log-probs: {text}", flush=True)


def from_rollout(batch, config):
    """verl's compute_log_prob output (`old_log_probs`, `entropys`, meta temperature) taken from the rollout's values in
    `batch` (removed from it), or None where verl's pass must run."""
    from verl import DataProto

    rollout = config.actor_rollout_ref.rollout
    if str(rollout.get("p40_log_probs", "pass")) != "rollout":
        return None
    keys = ("rollout_log_probs", "rollout_entropys", TEMPERATURE_KEY)
    if any(key not in batch.batch.keys() for key in keys):
        _say_once("the rollout returned none (it decoded with generate()): verl's old_log_prob pass computes them")
        return None
    at = batch.batch.pop(TEMPERATURE_KEY)
    if not bool((at == float(rollout.temperature)).all()):
        for key in keys[:2]:  # not compared with the pass's in verl's rollout_probs_diff metrics either
            batch.batch.pop(key)
        _say_once(
            f"the rollout computed them at temperature {float(at[0]):g}, not rollout.temperature "
            f"{float(rollout.temperature):g}: verl's old_log_prob pass computes them"
        )
        return None
    _say_once("the rollout's own (fp32, the actor's weights): verl's old_log_prob pass skipped")
    return DataProto.from_dict(
        tensors={
            "old_log_probs": batch.batch.pop("rollout_log_probs"),
            "entropys": batch.batch.pop("rollout_entropys"),
        },
        meta_info={"temperature": rollout.temperature},
    )
