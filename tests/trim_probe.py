"""Run verl's actor and critic (the patched copy first on PYTHONPATH) with trim_padding off and on (test_trim.py).

Usage: python trim_probe.py CONFIG_YAML   (the composed config `verl-p40 config --profile p40` prints)
A tiny random Qwen2 actor and a token-classification critic of the same shape, on a CPU, one process group of
one. A batch of 12 rows with prompts of 2..12 of 12 columns (left padding) and responses of 1..10 of 10 columns
(right padding). Prints JSON: the largest differences under the response mask between the two settings for the
old log-probs, entropies, values and the gradients of one actor and one critic update, the widths the models
were called with, and the rows x columns the actor's update reported (perf/p40_tokens/*). `padded`: trimming on
as before issue 67, the actor's logits padded back to response_length + 1 columns (a forward hook does what
forward_trimmed did), against today's (the log-probs of the kept columns, the results padded): the largest
differences over every column, and the columns of the logits the actor's model handed back.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from omegaconf import OmegaConf, open_dict
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification
from verl import DataProto
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.critic.dp_critic import DataParallelPPOCritic

PROMPT, RESPONSE, ROWS, VOCAB = 12, 10, 12, 300


def batch() -> DataProto:
    g = torch.Generator().manual_seed(0)
    prompt_len = torch.tensor([2, 12, 5, 7, 3, 9, 4, 11, 6, 8, 10, 2])
    response_len = torch.tensor([10, 1, 4, 10, 7, 2, 9, 3, 5, 6, 8, 1])
    input_ids = torch.randint(1, VOCAB, (ROWS, PROMPT + RESPONSE), generator=g)
    cols = torch.arange(PROMPT + RESPONSE)
    prompt_mask = (cols[None, :PROMPT] >= PROMPT - prompt_len[:, None]).long()
    response_mask = (cols[None, :RESPONSE] < response_len[:, None]).long()
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    input_ids = input_ids * attention_mask  # padding is token 0, as any pad id would be
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # verl's, from the mask
    advantages = torch.randn(ROWS, RESPONSE, generator=g) * response_mask
    return DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, PROMPT:],
            "response_mask": response_mask,
            "advantages": advantages,
            "old_log_probs": -torch.rand(ROWS, RESPONSE, generator=g) * 5,
            "returns": torch.randn(ROWS, RESPONSE, generator=g),
            "values": torch.randn(ROWS, RESPONSE, generator=g),
        },
        meta_info={"micro_batch_size": 4, "temperature": 1.0, "use_dynamic_bsz": False},
    )


class Recorded(torch.optim.SGD):
    """SGD at lr 0 that keeps the gradients of its last step (verl zeroes them after the update)."""

    def __init__(self, module: torch.nn.Module):
        self.names = dict(module.named_parameters())
        super().__init__(module.parameters(), lr=0.0)
        self.grads: dict[str, torch.Tensor] = {}

    def step(self, closure=None):
        self.grads = {n: p.grad.clone() for n, p in self.names.items() if p.grad is not None}
        return super().step(closure)


class Widths:
    """Records the sequence width of every call of a model."""

    def __init__(self, module: torch.nn.Module):
        self.seen: list[int] = []
        module.register_forward_pre_hook(
            lambda _m, _a, kw: self.seen.append(int(kw["input_ids"].shape[1])), with_kwargs=True
        )


def model_shape() -> Qwen2Config:
    """The tiny Qwen2 both models take (the critic as a token classifier without dropout, as verl's)."""
    return Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.5,
        attn_implementation="sdpa",
        num_labels=1,
        classifier_dropout=0.0,
    )


class Logits:
    """Wraps the actor's forward_trimmed (dp_actor's name for it) to record the columns of the logits it hands the
    actor; `pad`: pads them first to response_length + 1 with zeros, as forward_trimmed did before issue 67."""

    def __init__(self, pad: bool):
        import verl.workers.actor.dp_actor as dp_actor
        from verl.utils.p40_trim import forward_trimmed

        self.seen: list[int] = []
        self.pad, self.original = pad, forward_trimmed
        dp_actor.forward_trimmed = self.call  # each run() replaces the last run's wrapper

    def call(self, module, enabled, response_length, causal_lm, *args, **kwargs):
        output = self.original(module, enabled, response_length, causal_lm, *args, **kwargs)
        columns = output.logits.shape[1]
        if causal_lm and self.pad and columns < response_length + 1:
            output.logits = torch.nn.functional.pad(output.logits, (0, 0, 0, response_length + 1 - columns))
        if causal_lm:
            self.seen.append(int(output.logits.shape[1]))
        return output


def run(config, trim: bool, pad_logits: bool = False) -> dict:
    actor_cfg = config.actor_rollout_ref.actor.copy()
    critic_cfg = config.critic.copy()
    with open_dict(actor_cfg), open_dict(critic_cfg):
        actor_cfg.trim_padding = trim
        actor_cfg.use_remove_padding = False
        actor_cfg.ppo_mini_batch_size = ROWS  # one update: one mini-batch of 3 micro-batches
        actor_cfg.ppo_micro_batch_size_per_gpu = 4
        actor_cfg.entropy_coeff = 0.01  # the entropy's gradient is compared too
        actor_cfg.grad_clip = critic_cfg.grad_clip = 1e9  # the gradients as computed, not rescaled by clipping
        critic_cfg.model.trim_padding = trim
        critic_cfg.ppo_mini_batch_size = ROWS
        critic_cfg.ppo_micro_batch_size_per_gpu = 4
        # verl's own update micro-batches (the plan's length-grouped ones are update_probe.py's subject)
        actor_cfg.p40_update_tokens = critic_cfg.p40_update_tokens = 0
    torch.manual_seed(0)
    actor_model, critic_model = Qwen2ForCausalLM(model_shape()), Qwen2ForTokenClassification(model_shape())
    widths = {"actor": Widths(actor_model), "critic": Widths(critic_model)}
    logits = Logits(pad_logits)
    # lr 0: the update runs as verl runs it and leaves the weights, so the gradients of its step can be compared
    actor_optim, critic_optim = Recorded(actor_model), Recorded(critic_model)
    actor = DataParallelPPOActor(actor_cfg, actor_model, actor_optim)
    critic = DataParallelPPOCritic(critic_cfg, critic_model, critic_optim)
    data = batch()
    log_probs, entropy = actor.compute_log_prob(data, calculate_entropy=True)
    values = critic.compute_values(data)
    data.meta_info.update({"micro_batch_size": 4})
    critic.update_critic(data)  # verl's order: the critic's update, then the actor's, which reports the counts
    metrics = actor.update_policy(data)
    return {
        "log_probs": log_probs,
        "entropy": entropy,
        "values": values,
        "mask": data.batch["response_mask"],
        "actor_grads": actor_optim.grads,
        "critic_grads": critic_optim.grads,
        "widths": {k: w.seen for k, w in widths.items()},
        "counts": {k.split("/")[-1]: v for k, v in metrics.items() if k.startswith("perf/p40_tokens/")},
        "logits_columns": logits.seen,
    }


def largest(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((a - b).abs() * mask).max())


def main(config_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("TRIM_PROBE_PORT", "29533"))
    dist.init_process_group(backend="gloo", rank=0, world_size=1)
    config = OmegaConf.load(config_path)
    full, trimmed, padded = run(config, False), run(config, True), run(config, True, pad_logits=True)
    mask = full["mask"].bool()
    grads = {}
    for role in ("actor_grads", "critic_grads"):
        assert full[role].keys() == trimmed[role].keys() and full[role]
        grads[role] = {
            "largest": max(float((full[role][n] - trimmed[role][n]).abs().max()) for n in full[role]),
            "norm": float(torch.sqrt(sum((g**2).sum() for g in full[role].values()))),
        }
    print(
        json.dumps(
            {
                "log_probs": largest(full["log_probs"], trimmed["log_probs"], mask),
                "entropy": largest(full["entropy"], trimmed["entropy"], mask),
                "values": largest(full["values"], trimmed["values"], mask),
                "finite": all(
                    torch.isfinite(t[k]).all().item()
                    for t in (full, trimmed)
                    for k in ("log_probs", "entropy", "values")
                ),
                "grads": grads,
                "widths": {"full": full["widths"], "trimmed": trimmed["widths"]},
                "counts": {"full": full["counts"], "trimmed": trimmed["counts"]},
                # the columns of the logits the actor's model handed back, a call (its output layer's columns)
                "logits_columns": {"full": full["logits_columns"], "trimmed": trimmed["logits_columns"]},
                "full_width": PROMPT + RESPONSE,
                "padded": {
                    "log_probs": float((padded["log_probs"] - trimmed["log_probs"]).abs().max()),
                    "entropy": float((padded["entropy"] - trimmed["entropy"]).abs().max()),
                    "shapes": [list(t[k].shape) for t in (padded, trimmed) for k in ("log_probs", "entropy")],
                    "actor_grads": max(
                        float((padded["actor_grads"][n] - trimmed["actor_grads"][n]).abs().max())
                        for n in trimmed["actor_grads"]
                    ),
                    "logits_columns": {"padded": padded["logits_columns"], "trimmed": trimmed["logits_columns"]},
                },
                "response_width": RESPONSE,
            }
        )
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
