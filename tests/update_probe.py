"""Run verl's actor and critic updates (the patched copy first on PYTHONPATH) on verl's own micro-batches and on
length-grouped ones within a token budget (p40_update_tokens), trimming on in both (test_update_regroup.py).

Usage: python update_probe.py CONFIG_YAML BUDGET [LOSS_MODE]   (the composed config `verl-p40 config --profile p40`
prints; LOSS_MODE: the actor's policy_loss.loss_mode, vanilla unless given)
trim_probe.py's tiny Qwen2 actor and critic and its batch of 12 rows of mixed lengths, in two mini-batches of 6 rows
and micro-batches of 2 (gradient accumulation 3), KL loss and entropy bonus on. Prints JSON: for each role the
largest difference of any parameter's gradient at either optimizer step, the gradient norm, the metrics verl
reports (each list's mean, as verl's trainer reduces them) under both settings, and the widths the models ran at.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from omegaconf import OmegaConf, open_dict
from transformers import Qwen2ForCausalLM, Qwen2ForTokenClassification
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.critic.dp_critic import DataParallelPPOCritic

from trim_probe import ROWS, Recorded, Widths, batch, model_shape

MINI, MICRO = 6, 2


class Steps(Recorded):
    """Recorded that keeps the gradients of every step."""

    def __init__(self, module: torch.nn.Module):
        super().__init__(module)
        self.steps: list[dict[str, torch.Tensor]] = []

    def step(self, closure=None):
        out = super().step(closure)
        self.steps.append(self.grads)
        return out


def configs(config, budget: int, loss_mode: str = "vanilla"):
    actor_cfg, critic_cfg = config.actor_rollout_ref.actor.copy(), config.critic.copy()
    with open_dict(actor_cfg), open_dict(critic_cfg):
        for cfg in (actor_cfg, critic_cfg):
            cfg.ppo_mini_batch_size, cfg.ppo_micro_batch_size_per_gpu = MINI, MICRO
            cfg.p40_update_tokens = budget
            cfg.grad_clip = 1e9  # the gradients as computed, not rescaled by clipping
            cfg.loss_agg_mode = "token-mean"  # the recipes' (verl's default)
        actor_cfg.trim_padding, actor_cfg.use_remove_padding = True, False
        critic_cfg.model.trim_padding = True
        actor_cfg.entropy_coeff = 0.01  # the entropy's gradient is compared too
        actor_cfg.use_kl_loss, actor_cfg.kl_loss_coef, actor_cfg.kl_loss_type = True, 0.01, "low_var_kl"
        actor_cfg.policy_loss.loss_mode = loss_mode
    return actor_cfg, critic_cfg


def run(config, budget: int, loss_mode: str = "vanilla") -> dict:
    actor_cfg, critic_cfg = configs(config, budget, loss_mode)
    torch.manual_seed(0)
    actor_model, critic_model = Qwen2ForCausalLM(model_shape()), Qwen2ForTokenClassification(model_shape())
    widths = {"actor": Widths(actor_model), "critic": Widths(critic_model)}
    actor_optim, critic_optim = Steps(actor_model), Steps(critic_model)  # lr 0: the weights stay
    actor = DataParallelPPOActor(actor_cfg, actor_model, actor_optim)
    critic = DataParallelPPOCritic(critic_cfg, critic_model, critic_optim)
    data = batch()
    g = torch.Generator().manual_seed(1)
    log_probs, _ = actor.compute_log_prob(data, calculate_entropy=False)
    noise = lambda: 0.1 * torch.randn(ROWS, log_probs.shape[1], generator=g)  # noqa: E731
    data.batch["old_log_probs"] = log_probs + noise()  # near the policy: ratios inside and outside the clip
    data.batch["ref_log_prob"] = log_probs + noise()
    for w in widths.values():
        w.seen.clear()
    metrics = {**critic.update_critic(data), **actor.update_policy(data)}
    return {
        "grads": {"actor": actor_optim.steps, "critic": critic_optim.steps},
        "metrics": {k: sum(v) / len(v) for k, v in metrics.items() if k.split("/")[0] in ("actor", "critic")},
        "widths": {k: w.seen for k, w in widths.items()},
    }


def compare(verl: dict, regrouped: dict) -> dict:
    out = {}
    for role in ("actor", "critic"):
        a, b = verl["grads"][role], regrouped["grads"][role]
        assert len(a) == len(b) == ROWS // MINI and all(x.keys() == y.keys() and x for x, y in zip(a, b))
        out[role] = {
            "largest": max(float((x[n] - y[n]).abs().max()) for x, y in zip(a, b) for n in x),
            "norm": min(float(torch.sqrt(sum((g**2).sum() for g in x.values()))) for x in a),
        }
    return out


def main(config_path: str, budget: int, loss_mode: str = "vanilla") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("TRIM_PROBE_PORT", "29534"))
    dist.init_process_group(backend="gloo", rank=0, world_size=1)
    config = OmegaConf.load(config_path)
    verl, regrouped = run(config, 0, loss_mode), run(config, budget, loss_mode)
    report = {
        "grads": compare(verl, regrouped),
        "metrics": {"verl": verl["metrics"], "regrouped": regrouped["metrics"]},
        "widths": {"verl": verl["widths"], "regrouped": regrouped["widths"]},
    }
    print(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
