"""The exported GGUF files where users load them: llama.cpp (through llama-cpp-python, on the CPU). Its tokenizer
gives Qwen2.5's token ids, its chat API finds the checkpoint's chat template in the file, and its greedy answers are
transformers' answers from the exported Hugging Face folder (f16 token for token, q8_0 logits within 8-bit blocks'
precision). llama-cpp-python is built by tests/run.sh for a fixed CPU baseline (requirements/llamacpp.txt): these
tests run in CI, and skip only on a CPU without AVX2, the baseline's (one line says so).

Every call into llama.cpp runs in a child process (tests/native/child.py, the calls in llamacpp_calls.py): a binding
that dies (SIGILL from a build for another CPU, SIGSEGV) fails the test that called it, naming the signal, and the
suite goes on. The child returns what llama.cpp said (ids, metadata, logits); the comparisons with transformers run
here, and this process never loads llama.cpp."""

from __future__ import annotations

import json

import llamacpp_calls as calls
import numpy as np
import pytest
import torch

from conftest import make_tiny_qwen
from native import baseline
from native.child import in_child
from verl_p40.models import export
from verl_p40.models.options import ExportOptions

# the tests that load llama.cpp; the others (the chat comparison's message, export's refusals) run everywhere
needs_the_baseline = pytest.mark.skipif(
    baseline.cpu_lacks_avx2() is not None,
    reason=f"{baseline.cpu_lacks_avx2()}: llama.cpp is built for that baseline here (requirements/llamacpp.txt)",
)

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
NEW_TOKENS = calls.NEW_TOKENS


@pytest.fixture(scope="module")
def exported(tokenizer_dir, tmp_path_factory):
    """A tiny Qwen2 (weights spread enough that the greedy token is never a near tie) exported as users do it: the
    fp16 Hugging Face folder and both GGUF files."""
    tiny = make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp("llamacpp") / "tiny", initializer_range=0.5)
    out = tiny.parent / "exports"
    export.run(ExportOptions(model=str(tiny), checkpoints=str(tiny.parent), out=str(out), gguf=["f16", "q8_0"]))
    return tiny, out


@pytest.fixture(scope="module")
def hf(exported):
    """transformers' tokenizer and model from the exported fp16 folder, read in fp32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = exported[1] / "tiny-hf-fp16"
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    return AutoTokenizer.from_pretrained(folder), model


def _gguf(exported, kind: str):
    return exported[1] / f"tiny-{kind}.gguf"


def _prompt(tokenizer, chat) -> str:
    return tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)


@needs_the_baseline
@pytest.mark.parametrize("kind", ["f16", "q8_0"])
def test_llamacpp_tokenizes_chat_prompts_as_qwen25(exported, hf, kind):
    tokenizer, _ = hf
    texts = [_prompt(tokenizer, chat) for chat in CHATS]
    ids = [tokenizer(text).input_ids for text in texts]
    said = in_child(calls.tokenize_all, _gguf(exported, kind), texts, ids, what=f"llama.cpp reading tiny-{kind}.gguf")
    # add_bos=True is llama.cpp's default: the file's add_bos_token = false keeps Qwen2's no-BOS prompts
    for text, want, got, back in zip(texts, ids, said["tokens"], said["texts"]):
        assert got == want, text
        assert back == text
    assert said["eos"] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    meta = said["meta"]
    assert meta["tokenizer.ggml.pre"] == "qwen2" and meta["tokenizer.ggml.add_bos_token"] == "false"
    assert int(meta["tokenizer.ggml.padding_token_id"]) == tokenizer.pad_token_id


@needs_the_baseline
def test_special_tokens_from_a_folder_with_only_vocab_and_merges(exported, hf, tmp_path):
    """Qwen2.5's own folder (tests/fixtures, ../shared) has vocab.json and merges.txt but no tokenizer.json: the
    eos, padding and BOS settings llama.cpp reads are the tokenizer's all the same."""
    import shutil

    tokenizer, _ = hf
    folder = tmp_path / "plain"
    shutil.copytree(exported[0], folder, ignore=shutil.ignore_patterns("tokenizer.json"))
    path = export.gguf_file(folder, tmp_path / "plain.gguf", "f16")
    meta, eos = in_child(calls.metadata, path, what="llama.cpp reading plain.gguf")
    assert int(meta["tokenizer.ggml.eos_token_id"]) == tokenizer.eos_token_id == eos
    assert int(meta["tokenizer.ggml.padding_token_id"]) == tokenizer.pad_token_id
    assert meta["tokenizer.ggml.add_bos_token"] == "false"
    assert meta["tokenizer.chat_template"] == tokenizer.chat_template


def chat_differences(want_prompt: list[int], reply: dict) -> list[str]:
    """What differs between the chat API's reply and the file's own greedy answer to transformers' prompt, in ids."""
    said = []
    if reply["prompt_ids"] != want_prompt or reply["usage"]["prompt_tokens"] != len(want_prompt):
        said.append(f"prompt: chat API {reply['prompt_ids']}, transformers {want_prompt}")
    if reply["completion_ids"] != reply["direct"] or reply["usage"]["completion_tokens"] != len(reply["direct"]):
        said.append(
            f"completion: chat API {reply['completion_ids']} ({reply['usage']['completion_tokens']} counted), "
            f"the file's greedy continuation {reply['direct']}"
        )
    if reply["content"] != reply["direct_text"]:
        said.append(f"text: chat API {reply['content']!r}, the continuation {reply['direct_text']!r}")
    return said


@needs_the_baseline
def test_llamacpp_chat_api_applies_the_checkpoints_template_from_the_file(exported, hf):
    """The chat API's prompt is transformers' prompt token for token, and its greedy answer is the file's own greedy
    continuation of that prompt, ending at the same end-of-answer token. A failure lists both, in token ids."""
    tiny, _ = exported
    tokenizer, _ = hf
    from transformers import AutoTokenizer

    ids = [tokenizer(_prompt(tokenizer, chat)).input_ids for chat in CHATS]
    said = in_child(calls.chat, _gguf(exported, "f16"), CHATS, ids, what="llama.cpp's chat API on tiny-f16.gguf")
    template = AutoTokenizer.from_pretrained(tiny).chat_template
    assert said["template"] == template == tokenizer.chat_template
    assert said["format"] == "chat_template.default"  # llama-cpp-python took it from the metadata
    differences = [
        f"chat {k}: {d}" for k, (w, r) in enumerate(zip(ids, said["replies"])) for d in chat_differences(w, r)
    ]
    assert not differences, "\n".join(differences)


def test_chat_differences_name_the_ids_that_differ():
    """The chat test's failure message, on the measured native build's kind of reply (13 tokens counted where the
    file's greedy continuation has 12): the ids of both, side by side."""
    reply = {
        "prompt_ids": [1, 2, 3],
        "usage": {"prompt_tokens": 3, "completion_tokens": 13},
        "completion_ids": list(range(13)),
        "direct": list(range(12)),
        "content": "abc",
        "direct_text": "abc",
    }
    said = chat_differences([1, 2, 3], reply)
    assert said == [
        f"completion: chat API {list(range(13))} (13 counted), the file's greedy continuation {list(range(12))}"
    ]
    assert (
        chat_differences(
            [1, 2, 3],
            {**reply, "completion_ids": list(range(12)), "usage": {"prompt_tokens": 3, "completion_tokens": 12}},
        )
        == []
    )
    assert chat_differences(
        [1, 2, 4], {**reply, "completion_ids": list(range(12)), "usage": {"prompt_tokens": 3, "completion_tokens": 12}}
    )[0].startswith("prompt: chat API [1, 2, 3], transformers [1, 2, 4]")


def _greedy(model, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, len(ids) :].tolist()


def _logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def _gap(ours: np.ndarray, reference: np.ndarray) -> float:
    """The largest difference between llama.cpp's logits and transformers' along the same ids, over their spread."""
    gap = float(np.abs(ours - reference).max() / (reference.max() - reference.min()))
    print(f"logits: {gap:.4f} of their spread")
    return gap


@needs_the_baseline
def test_llamacpp_f16_greedy_answers_are_transformers_answers(exported, hf):
    """Token for token, or parting only where transformers' own top two tokens are closer than f16's rounding (0.5 %
    of the logits' spread: llama.cpp rounds the activations to f16 before each f16 product); and the logits along
    the prompt and the answer within that 0.5 %."""
    tokenizer, model = hf
    prompts = [tokenizer(_prompt(tokenizer, chat)).input_ids for chat in CHATS]
    expected = [_greedy(model, ids) for ids in prompts]
    said = in_child(
        calls.answers_and_scores, _gguf(exported, "f16"), prompts, expected, what="llama.cpp on tiny-f16.gguf"
    )
    for ids, answer, (got, scores) in zip(prompts, expected, said):
        same = next((k for k, (a, b) in enumerate(zip(got, answer)) if a != b), len(answer))
        if same < len(answer):  # the first divergence: a near tie in transformers' own logits
            logits = _logits(model, ids + answer[:same])[-1]
            top = np.sort(logits)[-2:]
            assert top[1] - top[0] < 0.005 * (logits.max() - logits.min()), (same, got, answer)
        prefix = ids + answer[: same + 1]
        assert _gap(scores[: len(prefix)], _logits(model, prefix)) < 0.005


@needs_the_baseline
def test_llamacpp_q8_0_logits_are_transformers_logits_within_8_bit_precision(exported, hf):
    """Along the chat-formatted prompts, within 15 % of their spread (12.5 % seen): weights and activations in
    8-bit blocks, on a random model of 32-wide rows whose large weights (initializer_range 0.5) carry the rounding
    through both layers; its greedy answers part from the fp16 model's within a few tokens. The real-weights result
    (bench/results/gguf-llamacpp-2026-12-04) compares q8_0's answers and logits on Qwen2.5's shape."""
    tokenizer, model = hf
    prompts = [tokenizer(_prompt(tokenizer, chat)).input_ids for chat in CHATS]
    said = in_child(calls.scores_along, _gguf(exported, "q8_0"), prompts, what="llama.cpp on tiny-q8_0.gguf")
    for ids, scores in zip(prompts, said):
        assert _gap(scores, _logits(model, ids)) < 0.15


@needs_the_baseline
def test_the_binding_in_use_is_built_for_the_baseline():
    """The llama.cpp these tests load reads AVX2 = 1 and no AVX-512/AVX-VNNI/AMX in llama_print_system_info()
    (requirements/llamacpp.txt): a native build (issue 66's SIGILL) fails here in words, not in a crash."""
    assert baseline.verdict() is None, baseline.verdict()


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
