# Installed into verl by verl-p40's patch set as verl/utils/p40_decode.py.
"""The HF rollout's generation without generate()'s per-token host work (`actor_rollout_ref.rollout.p40_decode`).

verl 0.5.0's HF rollout calls transformers' generate() on the FSDP-wrapped actor. Every generated token then costs
Python and about a thousand kernel launches through FSDP's hooks, a KV cache grown by concatenation, a host sync,
and, as the prompts are left-padded (an attention mask), SDPA's grouped-query path copies every layer's keys and
values to all 14 heads (transformers' repeat_kv): a P40 moves ~18 GB a token for that at batch 256. `generator()`
hands the rollout a function with generate()'s signature that does the same work another way:
- the weights are unsharded once (FSDP1's summon_full_params, FSDP2's unshard) and a plain copy of the model is made
  that shares them (built on the meta device, no copy of a weight), so no FSDP hook runs per token;
- the prompt runs as generate()'s first step does (its growing cache, its mask, SDPA), then its keys and values go
  into a static KV cache for prompt + answer columns, written in place from there on (transformers' StaticCache);
  each new token's attention reads every key and value once, the query heads grouped under their KV head (no copies);
- with `graph` (CUDA), the step of one token is captured once as a CUDA graph and replayed for every token after
  (CUDA graphs run on sm_61; Triton and torch.compile, the usual route to this, do not);
- sampling and stopping are generate()'s own: its merged generation config, logits processors and stopping criteria
  (transformers' private helpers, pinned with transformers 4.53), finished rows emit the pad token, and the loop
  ends when every row has ended (checked every STOP_CHECK tokens: the columns after that are pad, as verl pads);
- with `actor_rollout_ref.rollout.p40_decode_compact=true`, the prompt's left-padding columns that no row attends to
  are cut before the prompt's pass, and at those checks the rows that have ended leave the batch once at most
  COMPACT_AT of the rows still decoded are going on (the cache rows of those going on moved down in place, the step
  made again for the fewer rows): a decoding step's FLOPs follow the rows still going instead of the batch (with real
  answers about half the batch at the limit's half-way), the prefill's the longest prompt instead of verl's padded
  width. The tokens are the same up to floating-point summation order (a smaller batch, fewer padded columns); sampled
  rows draw from the same distributions, in another order of the random stream;
- with `actor_rollout_ref.rollout.p40_prefill_groups=N` (1, one pass, unless set; the p40 profile sets 8 since
  bench/results/grouped67-2026-12-07), the prompt runs in N passes of rows sorted by prompt length, each on the columns
  one of its rows attends to, their keys and values written to those columns of the one cache: the prompt pass's FLOPs
  follow the prompts' lengths instead of the longest prompt's, the same values up to summation order.
Anything else (beam search, a LoRA model, sliding-window layers, a model without a static cache) falls back to
generate(), said once; so does the rest of the process after the decoder fails for any reason but memory (a torch
or a sharding it never ran on), with the reason. Greedy answers match generate()'s up to floating-point summation
order in attention (256 of 256 identical in the GPU check, bench/results/speed-2026-12-03).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from types import SimpleNamespace

import torch

from verl_p40.patches.p40_decode_rules import COMPACT_AT, STOP_CHECK

MODES = ("off", "eager", "graph", "auto")
ATTENTION = "p40_decode"
_said: set[str] = set()
_failed: list[str] = []  # why the decoder failed in this process: generate() decodes from then on
_ROWS: list[int] = []  # rows x decoding steps of the training decodes since the last take_rows()
_PREFILL: list[int] = []  # rows x columns of their prompt passes


def take_rows() -> dict[str, int]:
    """{"perf/p40_tokens/rollout_decode": the rows the training decodes' steps ran on, summed,
    "perf/p40_tokens/rollout_prefill": the rows x columns their prompt passes ran on} since the last call, then zero
    (nothing where none ran): what the P40 projection prices generation's FLOPs by (perf/projection.py); reported with
    the actor's update, as p40_trim.take_counts(). On several GPUs the largest rank's (the slowest: verl keeps rank 0's
    metrics, and its longest answer is the whole batch's); every rank's update calls this."""
    rows, prefill = most_on_any_rank(sum(_ROWS)), most_on_any_rank(sum(_PREFILL))
    _ROWS.clear()
    _PREFILL.clear()
    counts = {"perf/p40_tokens/rollout_decode": rows, "perf/p40_tokens/rollout_prefill": prefill}
    return {key: value for key, value in counts.items() if value}


def _say_once(text: str) -> None:
    if text not in _said:
        _said.add(text)
        print(f"[verl-p40] decoding: {text}", flush=True)


def _grouped_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention interface. The prompt (several query columns, from position 0) goes to SDPA on the
    prompt's columns of the cache, as generate()'s first step; one new token's query reads each KV head once."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.shape[2] > 1:
        width = query.shape[2]
        return sdpa_attention_forward(
            module,
            query,
            key[:, :, :width],
            value[:, :, :width],
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            **kwargs,
        )
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    q = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # head h reads KV head h // groups, as repeat_kv
    if q.dtype != torch.float32:  # fp16/bf16 scores in fp32, as SDPA's kernels accumulate them (no overflow)
        q, key = q.float(), key.float()
    scores = torch.matmul(q, key.transpose(-1, -2)) * (dim**-0.5 if scaling is None else scaling)
    if attention_mask is not None:  # (batch, 1, 1, columns); none for a one-token prompt without padding
        scores = scores.masked_fill(~attention_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    return torch.matmul(probs, value).reshape(batch, 1, heads, dim), None


def _register_attention() -> None:
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(ATTENTION, _grouped_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the prompt's mask, built as for SDPA


def _fsdp_kinds():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    try:
        from verl.utils.fsdp_utils import FSDPModule
    except ImportError:  # verl's import of torch's FSDP2 failed: no FSDP2 module can exist either
        FSDPModule = None
    return FSDP, FSDPModule


def _unwrapped(module):
    """The Hugging Face model inside `module` (FSDP1's wrapped module, FSDP2's own class), or None."""
    FSDP, FSDPModule = _fsdp_kinds()
    inner = module.module if isinstance(module, FSDP) else module
    return inner if hasattr(inner, "config") and hasattr(inner, "_prepare_generation_config") else None


def unsupported(module) -> str | None:
    """Why the model cannot decode here, or None."""
    inner = _unwrapped(module)
    if inner is None:
        return "not a Hugging Face causal LM"
    if hasattr(inner, "peft_config"):
        return "a LoRA (peft) model"
    if not getattr(inner, "_supports_static_cache", False):
        return f"{type(inner).__name__} has no static KV cache"
    types = set(getattr(inner.config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"} or getattr(inner.config, "use_sliding_window", False):
        return "sliding-window attention layers"
    return None


def _unwrapped_name(name: str) -> str:
    """A parameter's or module's name without the wrappers' own components (FSDP1, activation checkpointing)."""
    wrappers = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module")
    return ".".join(part for part in name.split(".") if part not in wrappers)


@contextlib.contextmanager
def _full_weights(module):
    """{name: tensor} of every weight of `module`, unsharded, while the block runs (names as the unwrapped model's)."""
    FSDP, FSDPModule = _fsdp_kinds()
    from torch.distributed.fsdp._common_utils import TrainingState

    with contextlib.ExitStack() as stack:
        if isinstance(module, FSDP):
            for unit in FSDP.fsdp_modules(module):  # verl's rollout already holds the root's (recurse=False)
                if unit.training_state == TrainingState.IDLE:
                    stack.enter_context(FSDP.summon_full_params(unit, writeback=False, recurse=False))
            module = module.module
        elif FSDPModule is not None:
            for unit in module.modules():
                if isinstance(unit, FSDPModule):
                    unit.unshard()
                    stack.callback(unit.reshard)
        weights = {}
        for name, tensor in module.named_parameters(remove_duplicate=False):
            if "flat_param" in name:
                raise RuntimeError(f"a parameter is still flattened by FSDP: {name}")
            weights[_unwrapped_name(name)] = tensor
        yield weights


def _plain_copy(inner, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A model of `inner`'s class and config without FSDP, whose weights are `weights` (shared, not copied), with
    the grouped attention; buffers (rotary frequencies) taken from `inner`."""
    _, FSDPModule = _fsdp_kinds()
    cls = next(c for c in type(inner).__mro__ if FSDPModule is None or not issubclass(c, FSDPModule))
    config = copy.deepcopy(inner.config)
    with torch.device("meta"):
        plain = cls(config)
    missing, unexpected = plain.load_state_dict(weights, strict=False, assign=True)
    if unexpected:
        raise RuntimeError(f"weights the model does not have: {unexpected[:3]}")
    plain.tie_weights()
    sources = {_unwrapped_name(n): m for n, m in inner.named_modules()}  # a wrapper and its module: the module
    for name, sub in plain.named_modules():  # buffers and tensors kept as attributes (rotary inv_freq and its copy)
        source = sources.get(name)
        for attr, value in list(vars(sub).items()) + list(sub._buffers.items()):
            if isinstance(value, torch.Tensor) and value.is_meta and source is not None:
                setattr(sub, attr, getattr(source, attr))
    still = [n for n, t in list(plain.named_parameters()) + list(plain.named_buffers()) if t.is_meta]
    if still:
        raise RuntimeError(f"weights not found: {still[:3]} (missing: {missing[:3]})")
    for sub in plain.modules():
        if hasattr(sub, "config") and hasattr(sub.config, "_attn_implementation"):
            sub.config._attn_implementation = ATTENTION
    config._attn_implementation = ATTENTION
    return plain.eval()


class _Step:
    """One token's forward for every row; `graph`: the first call runs eagerly (on a side stream, as torch's CUDA
    graph documentation asks before a capture), then it is captured and every later call replays it."""

    def __init__(self, forward, graph: bool):
        self.forward, self.graph, self.out = forward, None if graph else False, None

    def __call__(self) -> torch.Tensor:
        if self.graph is None:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                logits = self.forward()
            torch.cuda.current_stream().wait_stream(stream)
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # Ray's threads may call CUDA
                    self.out = self.forward()
                self.graph = graph
            except Exception as exc:  # noqa: BLE001 - any capture failure: decode on without it, said once
                torch.cuda.synchronize()
                self.graph = False
                _say_once(f"CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:200]}); decoding without it")
            return logits
        if self.graph is False:
            return self.forward()
        self.graph.replay()
        return self.out


def _prompt_groups(attention_mask, groups: int) -> list[tuple[torch.Tensor | None, int]]:
    """(rows, first column) of each prompt pass: every row from column 0 for one group; else the rows sorted by prompt
    length and cut into `groups` of about equal size, each from the first column one of its rows attends to (left
    padding: the columns before it are padding in every row of the group)."""
    if groups <= 1:
        return [(None, 0)]
    width = attention_mask.shape[1]
    order = torch.argsort(attention_mask.sum(1), stable=True)
    out = []
    for rows in order.chunk(min(groups, order.numel())):
        used = attention_mask[rows].bool().any(0)
        out.append((rows, min(int(used.long().argmax()) if bool(used.any()) else width - 1, width - 1)))
    return out


def _part(tensor: torch.Tensor, rows: torch.Tensor | None, left: int) -> torch.Tensor:
    """The `rows` (None: all) of a (rows, columns) tensor, from column `left`."""
    return tensor[:, left:] if rows is None else tensor[rows, left:]


def _prompt_cache(model, input_ids, attention_mask, positions, total: int, groups: int = 1):
    """The prompt as generate()'s first step runs it (its cache, its mask), then its keys and values in a static cache
    of `total` columns; made after the prompt's passes, so their intermediates (3 x rows x prompt x the MLP's width)
    never sit beside the whole answer's cache. `groups` > 1: the rows run in that many passes by prompt length, each
    on its own columns (_prompt_groups), their keys and values written to those columns of the cache (the columns
    before are padding no row of the group attends to). Returns (the last column's logits, the static cache, the rows
    x columns the passes ran on)."""
    from transformers import DynamicCache, StaticCache

    batch, width = input_ids.shape
    passes, logits, tokens = [], None, 0
    for rows, left in _prompt_groups(attention_mask, groups):
        prompt = DynamicCache()
        last = model(
            input_ids=_part(input_ids, rows, left),
            attention_mask=_part(attention_mask, rows, left),
            position_ids=_part(positions, rows, left),
            past_key_values=prompt,
            cache_position=torch.arange(width - left, device=input_ids.device),
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        if rows is None:
            logits = last
        else:
            logits = last.new_empty(batch, last.shape[-1]) if logits is None else logits
            logits[rows] = last
        passes.append((rows, left, prompt))
        tokens += (batch if rows is None else rows.numel()) * (width - left)
    dtype = passes[0][2][0][0].dtype
    cache = StaticCache(
        config=model.config, max_batch_size=batch, max_cache_len=total, device=input_ids.device, dtype=dtype
    )
    for rows, left, prompt in passes:
        for layer in range(len(cache.key_cache)):
            keys, values = prompt[layer]
            if rows is None:
                cache.key_cache[layer][:, :, left:width].copy_(keys)
                cache.value_cache[layer][:, :, left:width].copy_(values)
            else:
                cache.key_cache[layer][rows, :, left:width] = keys
                cache.value_cache[layer][rows, :, left:width] = values
    return logits, cache, tokens


def _token_step(model, cache, attended, position, column, graph: bool):
    """(one token's step, its input token), for the rows of `attended` ((rows, total): the prompt's columns that are
    not padding, then every answer column); the token, `position` and `column` are written in place between steps.
    Each step attends to the prompt's columns that are not padding and to the answer's columns so far."""
    token = torch.zeros(attended.shape[0], 1, dtype=torch.long, device=attended.device)
    columns = torch.arange(attended.shape[1], device=attended.device)

    def forward() -> torch.Tensor:
        mask = (attended & (columns <= column))[:, None, None, :]
        return model(
            input_ids=token,
            attention_mask={"full_attention": mask},
            position_ids=position,
            past_key_values=cache,
            cache_position=column,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]

    return _Step(forward, graph), token


def _compact_cache(cache, keep: torch.Tensor) -> None:
    """The rows `keep` of a static cache moved down to its first rows, in place, and the cache cut to them (views: no
    second cache is allocated; a layer's kept rows are copied through one layer-sized buffer at a time)."""
    for layers in (cache.key_cache, cache.value_cache):
        for index, tensor in enumerate(layers):
            kept = tensor.index_select(0, keep)
            layers[index] = tensor[: keep.numel()]
            layers[index].copy_(kept)


def token_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of `tokens`, entropy) under the whole distribution of logits / temperature, in fp32, as verl's actor
    computes its old log-probs (dp_actor: logits.div_(temperature), logprobs_from_logits, entropy_from_logits): no
    top-k/top-p filtering, which verl's pass does not apply either."""
    scaled = logits.float() / temperature
    total = torch.logsumexp(scaled, dim=-1)
    picked = scaled.gather(-1, tokens[:, None]).squeeze(-1) - total
    entropy = total - (torch.softmax(scaled, dim=-1) * scaled).sum(-1)
    return picked, entropy


class _Live:
    """The rows the decoding steps run on: their static cache, attended columns and positions, the step made for them,
    and which rows of the whole batch they are (`rows`; None: every row, in order)."""

    def __init__(self, model, cache, attended, position, column, graph: bool):
        self.model, self.cache, self.attended, self.position = model, cache, attended, position
        self.column, self.graph, self.rows = column, graph, None
        self.step, self.token = _token_step(model, cache, attended, position, column, graph)

    @property
    def at(self):
        """What indexes the whole batch's tensors at these rows."""
        return slice(None) if self.rows is None else self.rows

    def leave(self, keep: torch.Tensor) -> None:
        """Only the rows `keep` (positions among those decoded now) go on: the cache moved down, the step made again."""
        self.rows = keep if self.rows is None else self.rows[keep]
        _compact_cache(self.cache, keep)
        self.attended, self.position = self.attended[keep], self.position[keep]
        self.step, self.token = _token_step(
            self.model, self.cache, self.attended, self.position, self.column, self.graph
        )

    def logits_after(self, tokens: torch.Tensor) -> torch.Tensor:
        self.token.copy_(tokens[:, None])
        self.position.add_(1)
        self.column.add_(1)
        return self.step()


def _start(model, input_ids, attention_mask, total: int, graph: bool, trim: bool, groups: int = 1):
    """(the prompt's last logits, the rows to decode, the prompt columns cut, the prompt passes' rows x columns) after
    the prompt's passes. `trim`: the left-padding columns no row attends to are cut first (verl pads every prompt to
    max_prompt_length): the pass, the cache and every step then run on the columns in use, the same values (positions
    come from the mask). `groups`: the prompt passes by length (_prompt_cache)."""
    left = int(attention_mask.bool().any(0).long().argmax()) if trim else 0
    input_ids, attention_mask, total = input_ids[:, left:], attention_mask[:, left:], total - left
    batch, width = input_ids.shape
    device = input_ids.device
    if graph and torch.is_autocast_enabled(device.type):  # its cache of cast weights must not be in a graph
        graph = False
        _say_once(f"autocast ({torch.get_autocast_dtype(device.type)}) is on: no CUDA graph")
    positions = attention_mask.long().cumsum(-1) - 1  # as generate() derives them from the mask
    positions.masked_fill_(attention_mask == 0, 1)
    logits, cache, tokens = _prompt_cache(model, input_ids, attention_mask, positions, total, groups)
    attended = torch.ones(batch, total, dtype=torch.bool, device=device)  # the prompt's padding is never attended
    attended[:, :width] = attention_mask.bool()
    column = torch.full((1,), width - 1, dtype=torch.long, device=device)
    return logits, _Live(model, cache, attended, positions[:, -1:].clone(), column, graph), left, tokens


@torch.no_grad()
def decode(
    model,
    input_ids,
    attention_mask,
    generation_config,
    processors,
    stopping,
    graph: bool,
    temperature=None,
    compact=False,
    prefill_groups=1,
):
    """generate()'s greedy or sampled tokens for `input_ids` (left-padded), with `model` a plain copy (_plain_copy):
    `.sequences`, (batch, prompt + generated) as generate() returns them; with a `temperature`, `.log_probs` and
    `.entropy` of each new token (token_log_probs; 0 after a row's end); `.row_steps` (the rows the decoding steps ran
    on, summed), `.prompt_columns` (the prompt pass's columns) and `.prompt_tokens` (its rows x columns, fewer by
    `prefill_groups` > 1: _prompt_cache). `compact`: only what is used, the prompt's columns some row attends to
    (_start) and, at the checks every STOP_CHECK tokens once at most COMPACT_AT of the rows go on, those rows."""
    batch, width = input_ids.shape
    device, total = input_ids.device, generation_config.max_length
    logits, live, cut, prompt_tokens = _start(model, input_ids, attention_mask, total, graph, compact, prefill_groups)
    # a processor holding the whole batch's inputs (the encoder repetition penalty) needs every row to the end
    leaves = compact and not any(hasattr(processor, "encoder_input_ids") for processor in processors)
    pad = generation_config._pad_token_tensor
    sample, ends = generation_config.do_sample, any(hasattr(criterion, "eos_token_id") for criterion in stopping)
    sequences = torch.full((batch, total), 0 if pad is None else int(pad), dtype=torch.long, device=device)
    sequences[:, :width] = input_ids
    unfinished = torch.ones(batch, dtype=torch.long, device=device)
    picked = torch.zeros(batch, total - width, device=device) if temperature is not None else None
    entropies = torch.zeros_like(picked) if picked is not None else None
    length, row_steps = width, 0
    while True:
        scores = processors(sequences[live.at, :length], logits.to(copy=True, dtype=torch.float32))
        tokens = torch.multinomial(torch.softmax(scores, -1), 1).squeeze(1) if sample else torch.argmax(scores, -1)
        if ends:
            tokens = tokens * unfinished + pad * (1 - unfinished)
        if temperature is not None:  # a row's tokens after its end are padding: 0, and masked out by verl
            log_prob, entropy = token_log_probs(logits, tokens, temperature)
            picked[live.at, length - width] = log_prob * unfinished
            entropies[live.at, length - width] = entropy * unfinished
        sequences[live.at, length] = tokens
        length, row_steps = length + 1, row_steps + tokens.shape[0]
        unfinished = unfinished & ~stopping(sequences[live.at, :length], scores)
        if length >= total:
            break
        if (length - width) % STOP_CHECK == 0:
            going = int(unfinished.sum())
            if going == 0:
                break
            if leaves and going <= COMPACT_AT * unfinished.shape[0]:
                keep = unfinished.nonzero().squeeze(1)
                live.leave(keep)
                tokens, unfinished = tokens[keep], unfinished[keep]
        logits = live.logits_after(tokens)
    out = SimpleNamespace(sequences=sequences[:, :length], log_probs=None, entropy=None, row_steps=row_steps)
    out.prompt_columns, out.prompt_tokens = width - cut, prompt_tokens  # what the prompt's passes and the cache ran on
    if temperature is not None:
        out.log_probs, out.entropy = picked[:, : length - width], entropies[:, : length - width]
        out.temperature = float(temperature)
    return out


def _sampling(inner, config, input_ids, attention_mask, kwargs: dict):
    """(the generation config with its lengths set, generate()'s logits processors, its stopping criteria), made by
    generate()'s own helpers as it makes them for a greedy or sampled decode."""
    from transformers import LogitsProcessorList, StoppingCriteriaList

    inner._prepare_special_tokens(config, True, device=input_ids.device)
    config = inner._prepare_generated_length(
        generation_config=config,
        has_default_max_length=kwargs.get("max_length") is None,
        has_default_min_length=kwargs.get("min_length") is None,
        model_input_name="input_ids",
        inputs_tensor=input_ids,
        input_ids_length=input_ids.shape[1],
    )
    processors = inner._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=input_ids.shape[1],
        encoder_input_ids=input_ids,
        prefix_allowed_tokens_fn=None,
        logits_processor=LogitsProcessorList(),
        device=input_ids.device,
        model_kwargs={"attention_mask": attention_mask},
    )
    stopping = inner._get_stopping_criteria(generation_config=config, stopping_criteria=StoppingCriteriaList())
    return config, processors, stopping


def _generate(
    module,
    graph: bool,
    log_probs_at,
    compact: bool,
    counted: bool,
    prefill_groups: int = 1,
    input_ids=None,
    attention_mask=None,
    generation_config=None,
    **kwargs,
):
    """generate()'s signature, as verl's HF rollout calls it; returns an object with `.sequences` (and, with
    `log_probs_at` (a temperature), the decoder's `.log_probs` and `.entropy`; generate()'s output has neither).
    `compact`: the prompt's unused padding columns are cut and ended rows leave the batch (decode()); `counted`: the
    decode's rows go to take_rows()."""
    from transformers.generation.configuration_utils import GenerationMode

    inner = _unwrapped(module)
    config, model_kwargs = inner._prepare_generation_config(copy.deepcopy(generation_config), **kwargs)
    mode = config.get_generation_mode()
    extra = set(model_kwargs) - {"use_cache", "output_scores", "return_dict_in_generate"}
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE) or config.num_return_sequences != 1 or extra:
        _say_once(f"{mode.value} with {sorted(extra)} is generate()'s: decoding through it")
        return module.generate(
            input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs
        )
    config, processors, stopping = _sampling(inner, config, input_ids, attention_mask, kwargs)
    _register_attention()
    out = None
    try:
        with _full_weights(module) as weights:
            model = _plain_copy(inner, weights)
            settings = (config, processors, stopping, graph, log_probs_at, compact, prefill_groups)
            out = decode(model, input_ids, attention_mask, *settings)
    except torch.cuda.OutOfMemoryError:
        raise  # generate() would need the same memory: the plan's sizes are what to change
    except Exception as exc:  # noqa: BLE001 - a path the decoder was never run on (a torch, a sharding): not fatal
        _failed.append(f"{type(exc).__name__}: {str(exc)[:300]}")
    # every rank decodes or every rank generates: generate() on the FSDP model all-gathers each layer and all-reduces
    # each token (transformers' synced_gpus), the decoder none of that, so one rank falling back alone would hang
    if every_rank(out is not None):
        if counted:  # a decode every rank kept: its rows are what the step's generation ran
            _ROWS.append(out.row_steps)
            _PREFILL.append(out.prompt_tokens)
        return out
    if not _failed:
        _failed.append("it failed on another rank")
    _say_once(f"the decoder failed ({_failed[0]}); transformers' generate() decodes from here on, on every rank")
    return module.generate(
        input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs
    )


def wants_log_probs(config) -> bool:
    """Whether the rollout returns its log-probs: `rollout.p40_log_probs=rollout` (the trainer takes them in place of
    verl's old_log_prob pass: p40_old_log_probs.py) or verl's own `rollout.calculate_log_probs` (compared with the
    pass's in verl's training/rollout_probs_diff_* metrics)."""
    return str(config.get("p40_log_probs", "pass")) == "rollout" or bool(config.get("calculate_log_probs", False))


def generator(module, config, temperature: float | None = None):
    """What verl's HF rollout calls in place of `module.generate`: `p40_decode` off (or absent) keeps generate();
    eager decodes with the static cache; graph and auto also replay the step as a CUDA graph where the model is on a
    CUDA GPU (elsewhere they are eager). With a `temperature` and a config that wants_log_probs, the decoder also
    returns each sampled token's log-prob and entropy at that temperature. `p40_decode_compact` (true/false; the p40
    profile sets true since its 20-step validation, verl's config has none): the prompt's unused padding columns are
    cut and ended rows leave the batch."""
    mode = str(config.get("p40_decode", "off") or "off")
    compact = config.get("p40_decode_compact", False) is True  # a bool: the plan's rules take no other
    groups = config.get("p40_prefill_groups")
    groups = 1 if groups is None else groups  # unset or null: one pass
    if mode not in MODES:
        raise ValueError(f"actor_rollout_ref.rollout.p40_decode={mode}: use one of {', '.join(MODES)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"actor_rollout_ref.rollout.p40_prefill_groups={groups}: use a whole number, 1 or more")
    if mode == "off" or _failed:
        return module.generate
    why = unsupported(module)
    if why:
        _say_once(f"p40_decode={mode} does not apply to {why}: generate() decodes")
        return module.generate
    cuda = next(module.parameters()).is_cuda
    graph = mode in ("graph", "auto") and cuda
    if mode == "graph" and not cuda:
        _say_once("p40_decode=graph: the model is not on a CUDA GPU, so no graph")
    dropped = ", the prompts' padding cut and ended rows leaving the batch" if compact else ""
    _say_once(f"static KV cache{', one CUDA graph a token' if graph else ''}{dropped} (p40_decode={mode})")
    at = float(temperature) if temperature is not None and wants_log_probs(config) else None
    # the training decodes' rows are counted (take_rows); validation's (no temperature) are not
    return functools.partial(_generate, module, graph, at, compact, temperature is not None, groups)


TEMPERATURE_KEY = "rollout_log_probs_temperature"  # (rows,): the temperature the log-probs were computed at
KEYS = ("rollout_log_probs", "rollout_entropys", TEMPERATURE_KEY)


def add_log_probs(batch, output, response_length: int) -> None:
    """The rollout's log-probs and entropies into verl's batch (`rollout_log_probs`, as verl 0.5.0's vLLM and SGLang
    rollouts name theirs, and `rollout_entropys`), (rows, response_length), 0 past each answer's end, with the
    temperature they were computed at (TEMPERATURE_KEY, one a row: p40_old_log_probs.py checks it against the one
    the update divides by); nothing when generate() decoded (the trainer then runs verl's pass)."""
    log_probs = getattr(output, "log_probs", None)
    if log_probs is None:
        return
    rows, width = log_probs.shape
    for key, values in (("rollout_log_probs", log_probs), ("rollout_entropys", output.entropy)):
        padded = values.new_zeros(rows, response_length)
        padded[:, : min(width, response_length)] = values[:, :response_length]
        batch[key] = padded
    batch[TEMPERATURE_KEY] = log_probs.new_full((rows,), output.temperature)


def _over_ranks(value: int, op: str) -> int:
    """`value` reduced (MIN or MAX) over the default process group's ranks (itself without one): an all-reduce, on the
    GPU under NCCL."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    held = torch.tensor([int(value)], device=device)
    dist.all_reduce(held, op=getattr(dist.ReduceOp, op))
    return int(held.item())


def most_on_any_rank(value: int) -> int:
    """The largest `value` of the ranks; every rank's update calls it once a step (take_rows)."""
    return _over_ranks(value, "MAX")


def every_rank(local: bool) -> bool:
    """Whether `local` holds on every rank (itself without a process group). Every rank's rollout calls it once a
    generate_sequences, as verl runs them all."""
    return bool(_over_ranks(int(local), "MIN"))


def all_or_none(parts: list) -> list:
    """The rollout's pieces (DataProto) with their log-probs only where every piece of every rank has them: the
    decoder can fail after a first piece, or on one rank only, and leave the rest to generate() (which returns
    none); verl's concat of the pieces, and of the ranks' outputs on 2 and 4 GPUs, needs equal keys. Otherwise no
    rank keeps them and the trainer runs its pass for the whole batch."""
    keys = KEYS
    if every_rank(all(key in part.batch.keys() for part in parts for key in keys)):
        return parts
    for part in parts:
        for key in keys:
            if key in part.batch.keys():
                part.batch.pop(key)
    return parts
