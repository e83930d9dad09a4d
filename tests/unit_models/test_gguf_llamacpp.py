"""The exported GGUF files where users load them: llama.cpp (through llama-cpp-python, on the CPU). Its tokenizer
gives Qwen2.5's token ids, its chat API finds the checkpoint's chat template in the file, and its greedy answers are
transformers' answers from the exported Hugging Face folder (f16 token for token, q8_0 logits within 8-bit blocks'
precision). llama-cpp-python is in requirements/test.txt: these tests run in CI, never skipped."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from llama_cpp import Llama

from conftest import make_tiny_qwen
from verl_p40.models import export
from verl_p40.models.options import ExportOptions

# chat-formatted prompts with Chinese, digits, runs of spaces and newlines: where a pre-tokenizer differs, ids differ
CHATS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "Please reason step by step, and put your final answer after ####."},
        {"role": "user", "content": "小明有 12 个苹果，吃了 3 个，又买了 1024 个。他现在有几个苹果？"},
    ],
    [
        {
            "role": "user",
            "content": "Natalia sold clips to 48 friends,  and then\n\n  half as many (2024年5月).\t$3.50?",
        }
    ],
]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def exported(tokenizer_dir, tmp_path_factory):
    """A tiny Qwen2 (weights spread enough that the greedy token is never a near tie) exported as users do it: the
    fp16 Hugging Face folder and both GGUF files."""
    tiny = make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp("llamacpp") / "tiny", initializer_range=0.5)
    out = tiny.parent / "exports"
    export.run(ExportOptions(model=str(tiny), checkpoints=str(tiny.parent), out=str(out), gguf="f16,q8_0"))
    return tiny, out


@pytest.fixture(scope="module")
def hf(exported):
    """transformers' tokenizer and model from the exported fp16 folder, read in fp32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = exported[1] / "tiny-hf-fp16"
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    return AutoTokenizer.from_pretrained(folder), model


def _llama(exported, kind: str) -> Llama:
    return Llama(str(exported[1] / f"tiny-{kind}.gguf"), n_ctx=256, n_threads=2, logits_all=True, verbose=False)


def _prompt(tokenizer, chat) -> str:
    return tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)


@pytest.mark.parametrize("kind", ["f16", "q8_0"])
def test_llamacpp_tokenizes_chat_prompts_as_qwen25(exported, hf, kind):
    tokenizer, _ = hf
    llm = _llama(exported, kind)
    for chat in CHATS:
        text = _prompt(tokenizer, chat)
        ids = tokenizer(text).input_ids
        # add_bos=True is llama.cpp's default: the file's add_bos_token = false keeps Qwen2's no-BOS prompts
        assert llm.tokenize(text.encode(), add_bos=True, special=True) == ids, text
        assert llm.detokenize(ids, special=True).decode() == text
    assert llm.token_eos() == tokenizer.convert_tokens_to_ids("<|im_end|>")
    meta = llm.metadata
    assert meta["tokenizer.ggml.pre"] == "qwen2" and meta["tokenizer.ggml.add_bos_token"] == "false"
    assert int(meta["tokenizer.ggml.padding_token_id"]) == tokenizer.pad_token_id


def test_special_tokens_from_a_folder_with_only_vocab_and_merges(exported, hf, tmp_path):
    """Qwen2.5's own folder (tests/fixtures, ../shared) has vocab.json and merges.txt but no tokenizer.json: the
    eos, padding and BOS settings llama.cpp reads are the tokenizer's all the same."""
    import shutil

    tokenizer, _ = hf
    folder = tmp_path / "plain"
    shutil.copytree(exported[0], folder, ignore=shutil.ignore_patterns("tokenizer.json"))
    llm = Llama(str(export.gguf_file(folder, tmp_path / "plain.gguf", "f16")), n_ctx=64, verbose=False)
    meta = llm.metadata
    assert int(meta["tokenizer.ggml.eos_token_id"]) == tokenizer.eos_token_id == llm.token_eos()
    assert int(meta["tokenizer.ggml.padding_token_id"]) == tokenizer.pad_token_id
    assert meta["tokenizer.ggml.add_bos_token"] == "false"
    assert meta["tokenizer.chat_template"] == tokenizer.chat_template


def test_llamacpp_chat_api_applies_the_checkpoints_template_from_the_file(exported, hf):
    tiny, _ = exported
    tokenizer, model = hf
    from transformers import AutoTokenizer

    llm = _llama(exported, "f16")
    template = AutoTokenizer.from_pretrained(tiny).chat_template
    assert llm.metadata["tokenizer.chat_template"] == template == tokenizer.chat_template
    assert llm.chat_format == "chat_template.default"  # llama-cpp-python took it from the metadata
    for chat in CHATS:
        ids = tokenizer(_prompt(tokenizer, chat)).input_ids
        reply = llm.create_chat_completion(chat, max_tokens=NEW_TOKENS, temperature=0.0)
        assert reply["usage"]["prompt_tokens"] == len(ids)
        # the same file's greedy answer from transformers' prompt: the chat API built that prompt, token for token
        direct = [t for t, _ in zip(llm.generate(ids, temp=0.0, reset=True), range(NEW_TOKENS))]
        assert reply["usage"]["completion_tokens"] == len(direct)
        assert reply["choices"][0]["message"]["content"] == llm.detokenize(direct).decode(errors="ignore")


def _greedy(model, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, len(ids) :].tolist()


def _logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_llamacpp_f16_greedy_answers_are_transformers_answers(exported, hf):
    """Token for token, or parting only where transformers' own top two tokens are closer than f16's rounding (0.5 %
    of the logits' spread: llama.cpp rounds the activations to f16 before each f16 product); and the logits along
    the prompt and the answer within that 0.5 %."""
    tokenizer, model = hf
    llm = _llama(exported, "f16")
    for chat in CHATS:
        ids = tokenizer(_prompt(tokenizer, chat)).input_ids
        expected = _greedy(model, ids)
        got = [t for t, _ in zip(llm.generate(ids, temp=0.0, reset=True), range(NEW_TOKENS))]
        same = next((k for k, (a, b) in enumerate(zip(got, expected)) if a != b), len(expected))
        if same < len(expected):  # the first divergence: a near tie in transformers' own logits
            logits = _logits(model, ids + expected[:same])[-1]
            top = np.sort(logits)[-2:]
            assert top[1] - top[0] < 0.005 * (logits.max() - logits.min()), (same, got, expected)
        assert _gap(llm, model, ids + expected[: same + 1]) < 0.005


def test_llamacpp_q8_0_logits_are_transformers_logits_within_8_bit_precision(exported, hf):
    """Along the chat-formatted prompts, within 15 % of their spread (12.5 % seen): weights and activations in
    8-bit blocks, on a random model of 32-wide rows whose large weights (initializer_range 0.5) carry the rounding
    through both layers; its greedy answers part from the fp16 model's within a few tokens. The real-weights result
    (bench/results/gguf-llamacpp-2026-12-04) compares q8_0's answers and logits on Qwen2.5's shape."""
    tokenizer, model = hf
    llm = _llama(exported, "q8_0")
    for chat in CHATS:
        ids = tokenizer(_prompt(tokenizer, chat)).input_ids
        assert _gap(llm, model, ids) < 0.15


def _gap(llm, model, ids: list[int]) -> float:
    """The largest difference between llama.cpp's logits and transformers' along `ids`, over their spread."""
    llm.reset()
    llm.eval(ids)
    reference = _logits(model, ids)
    ours = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
    gap = float(np.abs(ours - reference).max() / (reference.max() - reference.min()))
    print(f"logits: {gap:.4f} of their spread")
    return gap


def test_export_refuses_what_llamacpp_would_read_otherwise(exported, tmp_path):
    """What the writer cannot record is one line (the CLI: exit 2, no traceback) before anything is written."""
    import shutil

    from conftest import cli

    tiny, _ = exported
    for key, value, said in [
        ("rope_scaling", {"type": "yarn", "factor": 4.0}, "rope_scaling is set"),
        ("head_dim", 16, "head_dim is not hidden_size / num_attention_heads"),
    ]:
        bad = tmp_path / key
        shutil.copytree(tiny, bad)
        config = json.loads((bad / "config.json").read_text())
        (bad / "config.json").write_text(json.dumps({**config, key: value}))
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        result = cli("export", "--model", str(bad), "--out", str(tmp_path / "out"), "--gguf", "f16")
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and said in lines[0], result.stderr
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no --out folder, no file
