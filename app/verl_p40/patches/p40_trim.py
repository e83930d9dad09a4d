# Installed into verl by verl-p40's patch set as verl/utils/p40_trim.py.
"""Padding trimming for the actor, reference and critic passes without FlashAttention (`trim_padding`).

Without flash-attn's varlen kernels verl 0.5.0 cannot remove padding (`use_remove_padding`), so every micro-batch
runs at the full prompt + response width: prompts left-padded to max_prompt_length, responses right-padded to
max_response_length. `forward_trimmed` runs the model on the columns that hold a token in at least one row of the
micro-batch. The critic's values come back laid out as verl slices them (`[:, -response_length - 1 : -1]` are the
same positions as with the full width); the actor's logits are the kept columns only, whose log-probs and entropy the
actor pads to the response width (`pad_trimmed`), so their memory is per token, not per row. Position ids are
verl's own (from the attention mask), so the tokens the model sees and where it sees them are unchanged; dropped
columns are ones every row masks out.

`length_grouped` orders a forward-only pass (old log-probs, reference, values) by length before it is cut into
micro-batches, so that rows of similar length share one and trimming cuts more; the results are put back in the
original order through verl's own `restore_dynamic_batch`. Update passes keep verl's micro-batches unless
`p40_update_tokens` is set: verl 0.5.0 averages the loss per micro-batch, so the regrouped update
(p40_update.py) carries each token's weight from verl's own micro-batches.
"""

import torch
import torch.nn.functional as F

# Rows x columns the model ran on since the last take_counts(), by model and kind of pass: the tokens a step's
# passes computed, which verl-p40's P40 projection prices (perf/projection.py); reported with the actor's update.
# A causal LM's output layer runs on fewer columns where trimmed (`logits_to_keep`): counted apart, as `_logits`.
_COUNTS: dict[str, int] = {}


def _count(causal_lm: bool, rows: int, columns: int, logit_columns: int | None = None) -> None:
    """`columns` the model's layers ran on a row; `logit_columns` its output layer (a causal LM's; None: all)."""
    key = ("actor" if causal_lm else "critic") + ("_update" if torch.is_grad_enabled() else "_forward")
    _COUNTS[key] = _COUNTS.get(key, 0) + rows * columns
    if causal_lm:
        _COUNTS[f"{key}_logits"] = _COUNTS.get(f"{key}_logits", 0) + rows * (logit_columns or columns)


def take_counts() -> dict[str, int]:
    """{"perf/p40_tokens/<actor|critic>_<forward|update>": rows x columns} since the last call, then zero; the
    actor's also `..._logits`: rows x the columns its output layer (the vocabulary's logits) ran on."""
    out = {f"perf/p40_tokens/{key}": value for key, value in _COUNTS.items()}
    _COUNTS.clear()
    return out


def kept_columns(attention_mask: torch.Tensor, response_length: int) -> tuple[int, int]:
    """(left, kept): the first column any row attends to (at most the last prompt column, whose logits predict the
    first response token) and how many response columns any row attends to (at least 1)."""
    prompt_width = attention_mask.shape[1] - response_length
    used = attention_mask.bool().any(dim=0)
    prompt_used = torch.nonzero(used[:prompt_width])
    left = min(int(prompt_used[0]), prompt_width - 1) if len(prompt_used) else prompt_width - 1
    response_used = torch.nonzero(used[prompt_width:])
    kept = int(response_used[-1]) + 1 if len(response_used) else 1
    return left, kept


def forward_trimmed(module, enabled: bool, response_length: int, causal_lm: bool, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor, position_ids: torch.Tensor, **kwargs):
    """`module(...)` on the columns in use. A causal LM computes logits for the last prompt column and the kept
    response columns only (transformers' `logits_to_keep`): `kept + 1` columns, never padded; column j predicts
    response token j, so the actor (verl_050.py's actor-trim-log-probs) takes the log-probs and entropy of all of them
    where they are fewer than response_length + 1 and pads the results (`pad_trimmed`), the values padded logits gave:
    the logits' memory is per token, not per row (issue 67: padded logits held
    ~1 GB a Qwen2.5 row at 512 answer tokens, whatever the row's length). A critic's values (one column a token)
    are padded back to response_length + 1 columns, zeros past the longest response."""
    if not enabled:
        _count(causal_lm, input_ids.shape[0], input_ids.shape[1])
        return module(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)
    prompt_width = input_ids.shape[1] - response_length
    left, kept = kept_columns(attention_mask, response_length)
    end = prompt_width + kept
    _count(causal_lm, input_ids.shape[0], end - left, kept + 1)
    if causal_lm:
        kwargs["logits_to_keep"] = kept + 1
    output = module(input_ids=input_ids[:, left:end], attention_mask=attention_mask[:, left:end],
                    position_ids=position_ids[..., left:end], **kwargs)
    logits = output.logits[:, -(kept + 1):]
    if kept < response_length and not causal_lm:
        logits = F.pad(logits, (0, 0, 0, response_length - kept))
    output.logits = logits
    return output


def pad_trimmed(response_length: int, vocab: int, log_probs: torch.Tensor, entropy):
    """The actor's log-probs and entropy (rows, kept) of a trimmed pass, padded to (rows, response_length) with the
    values verl computed there from the zero logits forward_trimmed used to pad with: a uniform distribution's
    log-prob -log(vocab) and entropy log(vocab) (past every row's answer: masked out wherever verl reads them)."""
    missing = response_length - log_probs.shape[-1]
    if missing <= 0:
        return log_probs, entropy
    uniform = float(torch.logsumexp(torch.zeros(vocab, dtype=log_probs.dtype, device=log_probs.device), dim=0))
    log_probs = F.pad(log_probs, (0, missing), value=-uniform)
    return log_probs, None if entropy is None else F.pad(entropy, (0, missing), value=uniform)


def length_grouped(data, micro_batch_size: int):
    """The rows of `data` (a DataProto) ordered by attended length and cut into micro-batches of micro_batch_size,
    with the index lists verl's restore_dynamic_batch takes to put the results back in the original order."""
    lengths = data.batch["attention_mask"].sum(dim=-1)
    order = torch.argsort(lengths, stable=True)
    micro_batches = data.select_idxs(order).split(micro_batch_size)
    indices = order.tolist()
    return micro_batches, [indices[i:i + micro_batch_size] for i in range(0, len(indices), micro_batch_size)]
