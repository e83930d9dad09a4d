"""The rollout's old log-probs against verl's old_log_prob pass (issue 60): verl's patched HF rollout samples answers
with verl-p40's decoder (patches/p40_decode.py) on an FSDP1-wrapped actor as the trainer runs it (a plain model with
--cpu: FSDP1 refuses a CPU), returning each sampled token's log-prob and entropy (`p40_log_probs=rollout`); verl's
actor then computes them again on the same sequences (`DataParallelPPOActor.compute_log_prob`, the pass the plan
skips). Reported, under the response mask (fp32): the largest and mean absolute difference of the log-probs, of the
probabilities (verl's own training/rollout_probs_diff_* metric), of the entropies, of actor/entropy as verl aggregates
it (agg_loss with the actor's loss_agg_mode), and the PPO ratio exp(pass - rollout) at the step's start. The same
prompts are also sampled with the log-probs off, with the same seed: the tokens must be the same (computing the
log-probs does not change what is sampled), and the two rollouts' times show the log-probs' cost beside the pass's.

On the GPU, under the Pascal mask with the product's 24 GB cap (bench/experiments/rollout_log_probs_gpu.sh runs it):

    PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 VERL_P40_GPU_MEMORY_CAP_GB=24 \\
      python3 bench/experiments/rollout_log_probs.py --config /tmp/p40.yaml --model /tmp/qwen-real \\
      --data /tmp/gsm8k/test.parquet --questions 256 --new-tokens 512 --out $OUT/log-probs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def differences(rollout, pass_, mask, agg_mode: str) -> dict:
    """What the two sources' values differ by under `mask` (rows x response columns)."""
    import torch
    from verl.trainer.ppo.core_algos import agg_loss

    on = mask.bool()
    lp = (rollout["log_probs"] - pass_["log_probs"]).abs()[on]
    probs = (rollout["log_probs"].exp() - pass_["log_probs"].exp()).abs()[on]
    ent = (rollout["entropy"] - pass_["entropy"]).abs()[on]
    ratio = (pass_["log_probs"] - rollout["log_probs"]).exp()[on]
    agg = {
        k: float(agg_loss(loss_mat=v["entropy"], loss_mask=mask, loss_agg_mode=agg_mode))
        for k, v in (("rollout", rollout), ("pass", pass_))
    }
    return {
        "tokens": int(on.sum()),
        "log_probs": {"max_abs_diff": float(lp.max()), "mean_abs_diff": float(lp.mean())},
        "probs": {"max_abs_diff": float(probs.max()), "mean_abs_diff": float(probs.mean())},
        "entropy": {"max_abs_diff": float(ent.max()), "mean_abs_diff": float(ent.mean())},
        "actor_entropy": {**agg, "abs_diff": abs(agg["rollout"] - agg["pass"]), "loss_agg_mode": agg_mode},
        "ratio": {"min": float(ratio.min()), "max": float(ratio.max())},
        "mean_log_prob": float(pass_["log_probs"][on].mean()),
        "finite": bool(torch.isfinite(rollout["log_probs"][on]).all() and torch.isfinite(rollout["entropy"][on]).all()),
    }


def rollout_config(config, args, source: str):
    from omegaconf import OmegaConf, open_dict

    rollout = OmegaConf.create(OmegaConf.to_container(config.actor_rollout_ref.rollout, resolve=True))
    with open_dict(rollout):
        rollout.update(micro_batch_size=args.questions, response_length=args.new_tokens, temperature=args.temperature)
        rollout.update(top_p=args.top_p, top_k=args.top_k, p40_log_probs=source, n=1, do_sample=True)
    return rollout


def sample(actor, batch, rollout, seed: int, sync):
    import torch
    from verl.workers.rollout.hf_rollout import HFRollout

    torch.manual_seed(seed)
    sync()
    started = time.perf_counter()
    out = HFRollout(actor, rollout).generate_sequences(batch)
    sync()
    return out, time.perf_counter() - started


def actor_pass(config, module, out, temperature: float, sync):
    """verl's old_log_prob pass on the rollout's sequences: (log-probs, entropies, seconds)."""
    from omegaconf import open_dict
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    actor_cfg = config.actor_rollout_ref.actor.copy()
    with open_dict(actor_cfg):  # what fsdp_workers copies into the actor's config from the model's
        actor_cfg.use_remove_padding = bool(config.actor_rollout_ref.model.use_remove_padding)
        actor_cfg.trim_padding = bool(config.actor_rollout_ref.model.get("trim_padding", False))
        actor_cfg.use_fused_kernels = False
    actor = DataParallelPPOActor(actor_cfg, module, None)
    data = out.select(batch_keys=["responses", "input_ids", "attention_mask", "position_ids"])
    micro = int(config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu or 8)
    data.meta_info.update(micro_batch_size=micro, temperature=temperature, use_dynamic_bsz=False)
    sync()
    started = time.perf_counter()
    log_probs, entropy = actor.compute_log_prob(data=data, calculate_entropy=True)
    sync()
    return log_probs, entropy, time.perf_counter() - started


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="verl-p40 config's output (the composed verl config)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="a prepared split (verl-p40 prep's test.parquet)")
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true", help="a plain model on the CPU: FSDP1 refuses a CPU")
    parser.add_argument("--fp64", action="store_true", help="also the pass in fp64: each fp32 source's own rounding")
    return parser.parse_args()


def against_fp64(config, loaded, out, mask, log_probs, entropy, temperature: float) -> dict:
    """The largest distance of each fp32 source from the same pass on a float64 copy of the weights (what exact
    arithmetic gives, near enough): each one's own rounding."""
    import copy

    exact = actor_pass(config, copy.deepcopy(loaded.model).double().to(loaded.device), out, temperature, loaded.sync)
    on = mask.bool()
    far = lambda a, b: float((a.double() - b).abs()[on].max())  # noqa: E731
    return {
        "log_probs": {"rollout": far(out.batch["rollout_log_probs"], exact[0]), "pass": far(log_probs, exact[0])},
        "entropy": {"rollout": far(out.batch["rollout_entropys"], exact[1]), "pass": far(entropy, exact[1])},
    }


def main() -> None:
    args = _arguments()
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto

    from lib.rollout_actor import load, prompts, save

    loaded = load(args.model, args.cpu, "29571")
    tokenizer, actor, sync = loaded.tokenizer, loaded.module, loaded.sync
    config = OmegaConf.load(args.config)
    width = int(config.data.max_prompt_length)
    input_ids, attention_mask, positions = prompts(tokenizer, args.data, args.questions, width)
    batch = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": positions},
        meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id},
    ).to(loaded.device)
    plain, plain_s = sample(actor, batch, rollout_config(config, args, "pass"), args.seed, sync)
    out, out_s = sample(actor, batch, rollout_config(config, args, "rollout"), args.seed, sync)
    log_probs, entropy, pass_s = actor_pass(config, actor, out, args.temperature, sync)
    mask = out.batch["attention_mask"][:, width:]
    result = {
        **loaded.describe(args.questions, args.new_tokens),
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k, "seed": args.seed},
        "same_tokens_with_and_without_log_probs": bool(torch.equal(plain.batch["responses"], out.batch["responses"])),
        "seconds": {"rollout_without": round(plain_s, 3), "rollout_with": round(out_s, 3), "pass": round(pass_s, 3)},
        "mean_answer_tokens": round(float(mask.sum(-1).float().mean()), 1),
        # the answers' lengths (end-of-answer token included): those under new_tokens ended before the limit, where an
        # off-by-one at the end-of-answer token would show
        "answer_lengths": sorted({int(n) for n in mask.sum(-1)}),
        "ended_before_the_limit": int((mask.sum(-1) < args.new_tokens).sum()),
        **differences(
            {"log_probs": out.batch["rollout_log_probs"], "entropy": out.batch["rollout_entropys"]},
            {"log_probs": log_probs, "entropy": entropy},
            mask,
            str(config.actor_rollout_ref.actor.loss_agg_mode),
        ),
    }
    if args.fp64:
        result["against_fp64"] = against_fp64(config, loaded, out, mask, log_probs, entropy, args.temperature)
    print(json.dumps(result), flush=True)
    save(result, args.out, "rollout-log-probs.json")


if __name__ == "__main__":
    main()
