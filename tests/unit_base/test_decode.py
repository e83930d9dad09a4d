"""The HF rollout's decoder (patches/p40_decode.py, installed into verl as verl/utils/p40_decode.py) against
transformers' generate(), on a CPU: the same tokens, the same stop, the same padding, through FSDP2 too; what it
cannot do goes to generate() with a line. Its CUDA graph runs only on a GPU (bench/experiments/decode_check.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from verl_p40.patches import p40_decode


@pytest.fixture(scope="module")
def tiny(tokenizer_dir, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conftest import make_tiny_qwen

    folder = make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp("tiny-decode"), initializer_range=1.0)
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    texts = ["one two three four five six seven eight", "hello", "a b c"]
    prompts = tokenizer(texts, return_tensors="pt", padding=True)
    return model, tokenizer, prompts


def _kwargs(tokenizer, prompts, **settings) -> dict:
    """generate()'s arguments as verl's patched HF rollout passes them."""
    return {
        "input_ids": prompts.input_ids,
        "attention_mask": prompts.attention_mask,
        "max_new_tokens": 40,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "repetition_penalty": 1.0,
        "num_beams": 1,
        **settings,
    }


def _both(model, kwargs, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    plain = model.generate(**kwargs)
    torch.manual_seed(seed)
    decoded = p40_decode.generator(model, {"p40_decode": "eager"})(**kwargs).sequences
    return plain, decoded


@pytest.mark.parametrize(
    "settings",
    [
        {"do_sample": False},
        {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0},
        {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20},
    ],
    ids=["greedy", "sample", "sample-warped"],
)
def test_the_tokens_are_generates(tiny, settings):
    model, tokenizer, prompts = tiny
    plain, decoded = _both(model, _kwargs(tokenizer, prompts, **settings))
    assert decoded.shape == plain.shape and torch.equal(decoded, plain)


def test_rows_end_at_their_eos_and_the_loop_stops_soon_after_the_last(tiny):
    """An end token every row produces at a different step: each row's tokens and its pad after the end are
    generate()'s; generate() stops at the last row's end, the decoder at most STOP_CHECK - 1 tokens later (pad)."""
    model, tokenizer, prompts = tiny
    width = prompts.input_ids.shape[1]
    free = model.generate(**_kwargs(tokenizer, prompts, do_sample=False, max_new_tokens=64))[:, width:]
    shared = set(free[0].tolist()) & set(free[1].tolist()) & set(free[2].tolist())
    eos = next(t for t in shared if all(row.tolist().index(t) < 40 for row in free))
    plain, decoded = _both(model, _kwargs(tokenizer, prompts, do_sample=False, max_new_tokens=64, eos_token_id=eos))
    assert plain.shape[1] < width + 64, "generate() stopped early"
    assert torch.equal(decoded[:, : plain.shape[1]], plain)
    assert plain.shape[1] <= decoded.shape[1] < plain.shape[1] + p40_decode.STOP_CHECK
    assert bool((decoded[:, plain.shape[1] :] == tokenizer.pad_token_id).all())


def _ending_at_different_steps(model, tokenizer) -> dict:
    """generate()'s arguments for six prompts whose rows end at different steps: the end token is the one of their
    greedy answers that most rows reach, at the most different checks (rows without it run to the limit)."""
    texts = ["one two three four five six seven eight", "hello", "a b c", "seven", "the cat sat on the mat", "x y"]
    prompts = tokenizer(texts, return_tensors="pt", padding=True)
    width = prompts.input_ids.shape[1]
    free = model.generate(**_kwargs(tokenizer, prompts, do_sample=False, max_new_tokens=64))[:, width:]
    lists = [row.tolist() for row in free]

    def spread(token: int) -> tuple[int, int]:
        ends = [row.index(token) // p40_decode.STOP_CHECK for row in lists if token in row]
        return len(set(ends)), len(ends)

    eos = max({t for row in lists for t in row}, key=spread)
    return _kwargs(tokenizer, prompts, do_sample=False, max_new_tokens=64, eos_token_id=eos)


def test_compacted_rows_keep_their_tokens_and_log_probs(tiny):
    """p40_decode_compact: rows that have ended leave the batch at the checks; every row's tokens are still
    generate()'s, its log-probs and entropies those of the whole batch's decode, in its own row; and the steps ran on
    fewer rows than the batch times the steps."""
    model, tokenizer, _ = tiny
    kwargs = _ending_at_different_steps(model, tokenizer)
    plain = model.generate(**kwargs)
    settings = {"p40_decode": "eager", "p40_log_probs": "rollout"}
    whole = p40_decode.generator(model, settings, temperature=0.7)(**kwargs)
    compact = p40_decode.generator(model, {**settings, "p40_decode_compact": True}, temperature=0.7)(**kwargs)
    assert torch.equal(whole.sequences[:, : plain.shape[1]], plain)
    assert torch.equal(compact.sequences, whole.sequences)
    torch.testing.assert_close(compact.log_probs, whole.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(compact.entropy, whole.entropy, rtol=0, atol=1e-5)
    steps = whole.sequences.shape[1] - kwargs["input_ids"].shape[1]
    assert whole.row_steps == 6 * steps
    assert compact.row_steps < whole.row_steps


def test_compacted_sampling_draws_each_row_from_its_own_distribution(tiny):
    """Sampled with rows leaving the batch: each row's log-probs are those of its own tokens under the model (a whole
    forward pass over the sequences, as verl's old_log_prob pass computes them), so no row read another's cache."""
    model, tokenizer, _ = tiny
    # sampled near the greedy answers (a low temperature), so that the rows reach the end token at their own steps
    settings = {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 0.05}
    kwargs = {**_ending_at_different_steps(model, tokenizer), **settings}
    torch.manual_seed(3)
    out = p40_decode.generator(
        model, {"p40_decode": "eager", "p40_log_probs": "rollout", "p40_decode_compact": True}, temperature=0.05
    )(**kwargs)
    width = kwargs["input_ids"].shape[1]
    mask = torch.cat([kwargs["attention_mask"], torch.ones_like(out.sequences[:, width:])], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=out.sequences, attention_mask=mask, position_ids=positions).logits[:, width - 1 : -1]
    expected, _ = p40_decode.token_log_probs(
        logits.reshape(-1, logits.shape[-1]), out.sequences[:, width:].reshape(-1), 0.05
    )
    ended = (out.sequences[:, width:] == kwargs["eos_token_id"]).long().cumsum(1)
    live = (ended - (out.sequences[:, width:] == kwargs["eos_token_id"]).long()) == 0  # up to and with the end token
    torch.testing.assert_close(out.log_probs[live], expected.reshape(live.shape)[live], rtol=1e-4, atol=1e-4)
    assert bool((out.log_probs[~live] == 0).all())
    assert out.row_steps < out.sequences.shape[0] * (out.sequences.shape[1] - width), "no row left the batch"


def test_compact_cuts_the_prompt_columns_no_row_attends_to(tiny):
    """verl left-pads every prompt to max_prompt_length: with p40_decode_compact the prompt's pass, the cache and the
    steps run on the columns some row attends to, and the answers (greedy) and their log-probs are those of the
    decode over every column, itself generate()'s."""
    model, tokenizer, _ = tiny
    kwargs = _ending_at_different_steps(model, tokenizer)
    width = kwargs["input_ids"].shape[1]
    extra = torch.full((kwargs["input_ids"].shape[0], 10), tokenizer.pad_token_id)
    kwargs["input_ids"] = torch.cat([extra, kwargs["input_ids"]], 1)
    kwargs["attention_mask"] = torch.cat([torch.zeros_like(extra), kwargs["attention_mask"]], 1)
    plain = model.generate(**kwargs)
    settings = {"p40_decode": "eager", "p40_log_probs": "rollout"}
    whole = p40_decode.generator(model, settings, temperature=0.7)(**kwargs)
    compact = p40_decode.generator(model, {**settings, "p40_decode_compact": True}, temperature=0.7)(**kwargs)
    assert whole.prompt_columns == width + 10 and compact.prompt_columns == width
    assert torch.equal(whole.sequences[:, : plain.shape[1]], plain)
    assert torch.equal(compact.sequences, whole.sequences)
    torch.testing.assert_close(compact.log_probs, whole.log_probs, rtol=0, atol=1e-5)
    p40_decode.take_rows()


def test_rows_leave_again_and_again_and_keep_their_tokens(tiny, monkeypatch):
    """Checks every 2 tokens and rows leaving at the first that ends: several compactions, each mapping the rows
    left onto those before (rows[keep] of rows[keep]); the answers and log-probs are still the whole batch's."""
    model, tokenizer, _ = tiny
    kwargs = _ending_at_different_steps(model, tokenizer)
    settings = {"p40_decode": "eager", "p40_log_probs": "rollout"}
    whole = p40_decode.generator(model, settings, temperature=0.7)(**kwargs)
    cuts = []
    monkeypatch.setattr(p40_decode, "STOP_CHECK", 2)
    monkeypatch.setattr(p40_decode, "COMPACT_AT", 0.99)
    real = p40_decode._compact_cache
    monkeypatch.setattr(
        p40_decode, "_compact_cache", lambda cache, keep: (cuts.append(keep.numel()), real(cache, keep))
    )
    compact = p40_decode.generator(model, {**settings, "p40_decode_compact": True}, temperature=0.7)(**kwargs)
    assert len(cuts) >= 3, cuts
    assert torch.equal(compact.sequences, whole.sequences[:, : compact.sequences.shape[1]])
    assert bool((whole.sequences[:, compact.sequences.shape[1] :] == tokenizer.pad_token_id).all())
    steps = compact.log_probs.shape[1]
    torch.testing.assert_close(compact.log_probs, whole.log_probs[:, :steps], rtol=0, atol=1e-5)
    p40_decode.take_rows()


def test_a_processor_holding_the_whole_batch_keeps_every_row(tiny):
    """The encoder repetition penalty holds the whole batch's prompts: with it, no row leaves the batch (the decode
    stays generate()'s instead of failing and handing the process to generate())."""
    model, tokenizer, _ = tiny
    kwargs = {**_ending_at_different_steps(model, tokenizer), "encoder_repetition_penalty": 1.3}
    plain = model.generate(**kwargs)
    out = p40_decode.generator(model, {"p40_decode": "eager", "p40_decode_compact": True}, temperature=1.0)(**kwargs)
    assert not p40_decode._failed
    assert torch.equal(out.sequences[:, : plain.shape[1]], plain)
    assert out.row_steps == out.sequences.shape[0] * (out.sequences.shape[1] - kwargs["input_ids"].shape[1])
    p40_decode.take_rows()


def test_the_training_decodes_rows_are_counted_for_the_projection_and_validations_are_not(tiny):
    """take_rows() (logged with the actor's update as perf/p40_tokens/rollout_decode): the rows x decoding steps of
    the decodes since the last call, those with a temperature (training's; verl's validation passes none), then
    zero."""
    model, tokenizer, _ = tiny
    kwargs = _ending_at_different_steps(model, tokenizer)
    p40_decode.take_rows()
    p40_decode.generator(model, {"p40_decode": "eager"})(**kwargs)  # a validation's decode
    assert p40_decode.take_rows() == {}
    whole = p40_decode.generator(model, {"p40_decode": "eager"}, temperature=1.0)(**kwargs)
    compact = p40_decode.generator(model, {"p40_decode": "eager", "p40_decode_compact": True}, temperature=1.0)(
        **kwargs
    )
    assert p40_decode.take_rows() == {
        "perf/p40_tokens/rollout_decode": whole.row_steps + compact.row_steps,
        "perf/p40_tokens/rollout_prefill": whole.prompt_tokens + compact.prompt_tokens,  # the prompt passes' columns
    }
    assert p40_decode.take_rows() == {}


def test_prompt_passes_by_length_keep_the_tokens_and_run_fewer_columns(tiny):
    """p40_prefill_groups: the rows' prompt passes by prompt length, each on the columns one of its rows attends to,
    their keys and values in those columns of the one cache: the answers (greedy) and their log-probs are those of the
    single pass, itself generate()'s, from fewer rows x columns; one group is the single pass."""
    model, tokenizer, _ = tiny
    kwargs = _ending_at_different_steps(model, tokenizer)
    rows, width = kwargs["input_ids"].shape
    plain = model.generate(**kwargs)
    settings = {"p40_decode": "eager", "p40_log_probs": "rollout", "p40_decode_compact": True}
    single = p40_decode.generator(model, settings, temperature=0.7)(**kwargs)
    one = p40_decode.generator(model, {**settings, "p40_prefill_groups": 1}, temperature=0.7)(**kwargs)
    null = p40_decode.generator(model, {**settings, "p40_prefill_groups": None}, temperature=0.7)(**kwargs)  # unset
    assert single.prompt_tokens == one.prompt_tokens == null.prompt_tokens == rows * width  # no padding in the longest
    lengths = kwargs["attention_mask"].sum(1).sort().values
    for groups in (2, 3, 6):
        grouped = p40_decode.generator(model, {**settings, "p40_prefill_groups": groups}, temperature=0.7)(**kwargs)
        assert torch.equal(grouped.sequences[:, : plain.shape[1]], plain), groups
        assert torch.equal(grouped.sequences, single.sequences), groups
        # fp32 summation order in other shapes of pass (this tiny model's weights are large: initializer_range 1.0):
        # within 1e-4 here; keys or values in the wrong rows or columns move them by whole units
        torch.testing.assert_close(grouped.log_probs, single.log_probs, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(grouped.entropy, single.entropy, rtol=1e-4, atol=1e-4)
        # each group at its longest prompt: the rows sorted by length, cut into `groups` of about equal size
        expected = sum(int(chunk.max()) * chunk.numel() for chunk in lengths.chunk(groups))
        assert grouped.prompt_tokens == expected < rows * width, groups
    with pytest.raises(ValueError, match="p40_prefill_groups=0: use a whole number, 1 or more"):
        p40_decode.generator(model, {**settings, "p40_prefill_groups": 0})
    p40_decode.take_rows()


def test_fsdp2_weights_are_unsharded_for_the_decode_and_sharded_again(tiny, tmp_path):
    """A model sharded by FSDP2 (verl's strategy on a CPU), one process: the same tokens as the plain model's
    generate(), and its parameters are DTensors again afterwards (the shards FSDP2 trains)."""
    import copy

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    model, tokenizer, prompts = tiny
    kwargs = _kwargs(tokenizer, prompts, do_sample=False)
    plain = model.generate(**kwargs)
    sharded = copy.deepcopy(model)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        for layer in sharded.model.layers:
            fully_shard(layer)
        fully_shard(sharded)
        decoded = p40_decode.generator(sharded, {"p40_decode": "auto"})(**kwargs).sequences
        assert torch.equal(decoded, plain)
        assert all(isinstance(p, DTensor) for p in sharded.parameters())
    finally:
        dist.destroy_process_group()


def test_the_new_tokens_attention_is_sdpas_without_copying_the_heads():
    """One query column against a cache with masked columns: the grouped matmul gives SDPA's output over
    transformers' repeat_kv copies (what generate() computes), to float32 rounding."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    batch, heads, kv_heads, dim, columns = 3, 14, 2, 64, 37

    class Layer(torch.nn.Module):
        num_key_value_groups = heads // kv_heads

    query = torch.randn(batch, heads, 1, dim)
    key, value = torch.randn(batch, kv_heads, columns, dim), torch.randn(batch, kv_heads, columns, dim)
    mask = torch.rand(batch, 1, 1, columns) > 0.3
    mask[..., -1] = True  # every row attends to at least its own column
    expected, _ = sdpa_attention_forward(Layer(), query, key, value, mask, scaling=dim**-0.5)
    got, _ = p40_decode._grouped_attention(Layer(), query, key, value, mask, scaling=dim**-0.5)
    assert got.shape == expected.shape == (batch, 1, heads, dim)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_what_it_cannot_decode_goes_to_generate_and_says_why(tiny, capsys):
    model, tokenizer, prompts = tiny
    p40_decode._said.clear()
    kwargs = _kwargs(tokenizer, prompts, do_sample=False, num_beams=2, max_new_tokens=8)
    beams = p40_decode.generator(model, {"p40_decode": "eager"})(**kwargs)
    assert torch.equal(beams.sequences if hasattr(beams, "sequences") else beams, model.generate(**kwargs))
    assert "beam_search with [] is generate()'s: decoding through it" in capsys.readouterr().out
    assert p40_decode.generator(model, {"p40_decode": "off"}) == model.generate
    assert p40_decode.generator(model, {}) == model.generate  # verl without the setting: as before
    with pytest.raises(ValueError, match="p40_decode=fast: use one of off, eager, graph, auto"):
        p40_decode.generator(model, {"p40_decode": "fast"})


def test_a_one_token_prompt_without_padding(tiny):
    """The prompt's pass of one column takes the one-token attention, with no mask at all (nothing is padded)."""
    model, tokenizer, _ = tiny
    prompts = tokenizer(["hello", "world"], return_tensors="pt", padding=True)
    assert prompts.input_ids.shape[1] == 1 and bool(prompts.attention_mask.all())
    plain, decoded = _both(model, _kwargs(tokenizer, prompts, do_sample=False, max_new_tokens=12))
    assert torch.equal(decoded, plain)


def test_half_precision_scores_are_taken_in_fp32():
    """fp16 queries and keys (eval --dtype fp16): the scores in fp32, as SDPA accumulates them. Values of ~40 make
    q.k ~1e5, past fp16's 65,504: an fp16 product would be inf and the softmax NaN."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)

    class Layer(torch.nn.Module):
        num_key_value_groups = 7

    half = [(torch.rand(2, h, c, 64) * 10 + 35).to(torch.float16) for h, c in ((14, 1), (2, 40), (2, 40))]
    assert torch.isinf(half[0][0, 0] @ half[1][0, 0].T).any()  # what an fp16 product of these gives
    mask = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    expected, _ = sdpa_attention_forward(Layer(), *(t.float() for t in half), mask, scaling=0.125)  # the same values
    got, _ = p40_decode._grouped_attention(Layer(), *half, mask, scaling=0.125)
    assert got.dtype == torch.float16 and bool(torch.isfinite(got).all())
    torch.testing.assert_close(got.float(), expected, rtol=0.01, atol=0.05)  # fp16's own rounding of the output


def test_a_decoder_that_fails_hands_the_rest_of_the_process_to_generate(tiny, monkeypatch, capsys):
    """Anything but memory going wrong in the decoder (a torch or a sharding it never ran on): generate()'s answer
    for that call, one line with the reason, and generate() directly for every later call."""
    model, tokenizer, prompts = tiny
    kwargs = _kwargs(tokenizer, prompts, do_sample=False, max_new_tokens=8)

    def broken(*args, **kw):
        raise RuntimeError("weights not found: ['model.norm.weight']")

    monkeypatch.setattr(p40_decode, "_plain_copy", broken)
    p40_decode._said.clear()
    try:
        out = p40_decode.generator(model, {"p40_decode": "eager"})(**kwargs)
        assert torch.equal(out, model.generate(**kwargs))  # generate()'s own result
        said = capsys.readouterr().out
        assert "the decoder failed (RuntimeError: weights not found: ['model.norm.weight']); transformers' " in said
        assert p40_decode.generator(model, {"p40_decode": "eager"}) == model.generate
    finally:
        p40_decode._failed.clear()


_ONE_RANK_FAILS = """
import torch


def body(r, decode):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, eos_token_id=63, pad_token_id=0)
    model = Qwen2ForCausalLM(config).eval()
    kwargs = {"input_ids": torch.randint(1, 60, (2, 5)), "attention_mask": torch.ones(2, 5, dtype=torch.long),
              "max_new_tokens": 6, "do_sample": False, "eos_token_id": 63, "pad_token_id": 0}
    if r == 1:  # a path the decoder was never run on, on this rank only
        def broken(*args, **kw):
            raise RuntimeError("weights not found on rank 1")
        decode._plain_copy = broken
    out = decode.generator(model, {"p40_decode": "eager"})(**kwargs)
    return {
        "as_generate": isinstance(out, torch.Tensor) and bool(torch.equal(out, model.generate(**kwargs))),
        "later_calls_generate": decode.generator(model, {"p40_decode": "eager"}) == model.generate,
    }
"""


_ROWS_ON_TWO_RANKS = """
def body(r, decode):
    decode._ROWS.extend([100, 20] if r == 0 else [300])
    return decode.take_rows()
"""


def test_on_two_ranks_the_rows_reported_are_the_slowest_ranks(tmp_path):
    """verl keeps rank 0's update metrics: take_rows() reports the largest rank's decoding rows (an all-reduce on
    every rank's update), so the projection prices the rank that decoded longest (gloo, two processes)."""
    from conftest import run_two_ranks

    first, second = run_two_ranks(tmp_path, _ROWS_ON_TWO_RANKS, Path(p40_decode.__file__))
    assert first == second == {"perf/p40_tokens/rollout_decode": 300}


def test_a_decoder_failing_on_one_rank_sends_every_rank_to_generate(tmp_path):
    """On 2 and 4 GPUs, generate() on the FSDP model all-gathers every layer and all-reduces every token (transformers
    turns synced_gpus on), while the decoder runs none: a rank falling back alone would leave the others' collectives
    unmatched and hang NCCL. The ranks agree after each decode (an all-reduce of success): rank 1's decoder fails, so
    both ranks answer with generate() for that call and every later one (gloo, two processes)."""
    from conftest import run_two_ranks

    first, second = run_two_ranks(tmp_path, _ONE_RANK_FAILS, Path(p40_decode.__file__))
    assert first == second == {"as_generate": True, "later_calls_generate": True}
