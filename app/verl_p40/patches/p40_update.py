# Installed into verl by verl-p40's patch set as verl/utils/p40_update.py.
"""Length-grouped update micro-batches that keep every token's weight in the gradient (`p40_update_tokens`).

verl 0.5.0's actor and critic updates cut a mini-batch into micro-batches of `ppo_micro_batch_size_per_gpu`
consecutive rows, average the loss over each micro-batch's response tokens (loss_agg_mode token-mean:
`masked_mean(loss, response_mask)`) and divide it by the gradient accumulation GA. A token t of micro-batch m
therefore weighs 1 / (GA * N_m) in the gradient, N_m being m's response tokens: regrouping the rows by length
changes N_m, and with it the gradient.

`regroup` keeps verl's assignment to compute each token's weight, then orders the rows by length and cuts them into
micro-batches of at most `budget` rows x columns (the trimmed width: p40_trim.py; as many on every rank), each carrying
- `p40_token_weight`: the response mask times c / N_m (c, the mean of N_m, keeps the weights near 1), used in place
  of the response mask. Every aggregation of the update is a masked mean, so micro-batch k computes
  sum_k(w * x) / Q_k, Q_k = sum_k(w);
- `p40_loss_fraction`: Q_k / (c * GA), the factor the loss takes instead of 1 / GA. The loss is then
  sum_k(w * x) / (c * GA) = sum over k's tokens of x / (GA * N_m): over all micro-batches, today's sum exactly
  (only the order of the additions differs).
verl reports each micro-batch's metrics (losses, clip fractions, KL) and averages the list; `add_metrics` sums them
weighted by the fractions instead and `flush_metrics` appends one value a mini-batch: the mean of today's GA values.
Only token-mean is regrouped: the sequence modes average per row, which a fixed row count per micro-batch already
keeps, so their micro-batches stay verl's.
"""

import torch

_PENDING = "p40/pending"  # the mini-batch's weighted metric sums, kept in verl's metrics dict until the step


def today_weights(response_mask: torch.Tensor, micro_rows: int, accumulation: int) -> tuple[torch.Tensor, float]:
    """(weights, c * GA): each token's weight from verl's own micro-batches (consecutive rows of micro_rows), and the
    divisor that turns a micro-batch's weight sum into its loss fraction."""
    mask = response_mask.float()
    owner = torch.arange(mask.shape[0], device=mask.device) // micro_rows
    tokens = torch.zeros(int(owner[-1]) + 1, device=mask.device).index_add_(0, owner, mask.sum(dim=-1))
    mean = float(tokens.mean()) or 1.0
    per_row = torch.where(tokens > 0, mean / tokens.clamp(min=1), torch.zeros_like(tokens))[owner]
    return mask * per_row[:, None], mean * accumulation


def token_groups(attention_mask: torch.Tensor, response_length: int, budget: int) -> list[list[int]]:
    """Row indices ordered by attended length, cut into groups whose rows x trimmed width (longest prompt + longest
    response of the group) stay within budget; one row at least a group."""
    prompt = attention_mask[:, :-response_length].sum(dim=-1).tolist()
    response = attention_mask[:, -response_length:].sum(dim=-1).clamp(min=1).tolist()
    order = torch.argsort(attention_mask.sum(dim=-1), stable=True).tolist()
    groups: list[list[int]] = []
    width_p = width_r = 0
    for row in order:
        wp, wr = max(width_p, prompt[row]), max(width_r, response[row])
        if groups and (len(groups[-1]) + 1) * (wp + wr) <= budget:
            groups[-1].append(row)
            width_p, width_r = wp, wr
        else:
            groups.append([row])
            width_p, width_r = prompt[row], response[row]
    return groups


def as_many_as_every_rank(groups: list[list[int]]) -> list[list[int]]:
    """The groups, the largest split in two until there are as many as on the rank with the most: FSDP gathers the
    weights in every micro-batch's forward and backward, so every rank must run the same number (verl's dynamic
    batches agree on theirs the same way, seqlen_balancing's all-reduce of the count)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return groups
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    most = torch.tensor([len(groups)], device=device)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    groups = list(groups)
    while len(groups) < int(most):  # each rank holds as many rows, so a group of 2 rows or more is left to split
        largest = max(range(len(groups)), key=lambda i: len(groups[i]))
        rows = groups.pop(largest)
        groups[largest:largest] = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    return groups


def regroup(mini_batch, micro_batches: list, micro_rows: int, accumulation: int, budget: int) -> list:
    """verl's micro_batches unchanged when budget is 0; else the rows of mini_batch (a DataProto) length-grouped
    within budget tokens, with the weights that keep verl's gradient (the module's docstring)."""
    if budget <= 0:
        return micro_batches
    batch = mini_batch.batch
    weights, divisor = today_weights(batch["response_mask"], micro_rows, accumulation)
    groups = as_many_as_every_rank(token_groups(batch["attention_mask"], batch["response_mask"].shape[-1], budget))
    out = []
    for rows in groups:
        part = mini_batch.select_idxs(torch.tensor(rows))
        w = weights[rows]
        part.batch["p40_token_weight"] = w
        part.batch["p40_loss_fraction"] = (w.sum() / divisor).expand(len(rows)).clone()
        out.append(part)
    return out


def add_metrics(metrics: dict, micro_batch_metrics: dict, model_inputs: dict) -> None:
    """verl's append_to_dict for its own micro-batches; for regrouped ones, the metrics weighted by the micro-batch's
    loss fraction, summed until flush_metrics."""
    if "p40_loss_fraction" not in model_inputs:
        for key, value in micro_batch_metrics.items():
            metrics.setdefault(key, []).append(value)
        return
    fraction = float(model_inputs["p40_loss_fraction"][0])
    pending = metrics.setdefault(_PENDING, {})
    for key, value in micro_batch_metrics.items():
        pending[key] = pending.get(key, 0.0) + fraction * value


def flush_metrics(metrics: dict) -> None:
    """The mini-batch's weighted sums as one value each (what verl's mean over its GA micro-batches gives)."""
    for key, value in metrics.pop(_PENDING, {}).items():
        metrics.setdefault(key, []).append(value)
