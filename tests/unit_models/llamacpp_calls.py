"""What the llama.cpp tests (test_gguf_llamacpp.py) ask llama.cpp, each run in a child process by tests/native/child.py
(spawned: each function here is imported there by name). This module imports llama.cpp and numpy only: the
comparisons with transformers run in the test's own process."""

from __future__ import annotations

import numpy as np

NEW_TOKENS = 12
META = ("tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.padding_token_id")


def _llama(path, n_ctx: int = 256):
    from llama_cpp import Llama

    return Llama(str(path), n_ctx=n_ctx, n_threads=2, logits_all=True, verbose=False)


def ends_answer(llm, token: int) -> bool:
    """An end-of-generation token (<|im_end|>, <|endoftext|>, ...): where the chat API ends an answer."""
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def continuation(llm, ids: list[int], limit: int = NEW_TOKENS) -> list[int]:
    """The file's own greedy continuation of `ids`, up to `limit` tokens, ending before an end-of-generation token
    (where the chat API ends an answer)."""
    out: list[int] = []
    for token in llm.generate(ids, temp=0.0, reset=True):
        if ends_answer(llm, token) or len(out) == limit:
            break
        out.append(token)
    return out


def tokenize_all(path, texts: list[str], ids: list[list[int]]) -> dict:
    """llama.cpp's ids for each text (BOS as llama.cpp's default adds it), its text back from transformers' ids, its
    eos and the tokenizer metadata."""
    llm = _llama(path)
    return {
        "tokens": [llm.tokenize(t.encode(), add_bos=True, special=True) for t in texts],
        "texts": [llm.detokenize(i, special=True).decode() for i in ids],
        "eos": llm.token_eos(),
        "meta": {k: llm.metadata.get(k) for k in META},
    }


def metadata(path) -> tuple[dict, int]:
    llm = _llama(path, n_ctx=64)
    return dict(llm.metadata), llm.token_eos()


def chat(path, chats: list, ids: list[list[int]]) -> dict:
    """The chat API's reply to each chat with the token ids it ran on (its prompt, its completion: recorded from the
    generate() call inside create_chat_completion), beside the file's own greedy continuation of transformers'
    prompt ids."""
    llm = _llama(path)
    seen: dict = {}
    original = llm.generate

    def recording(tokens, *args, **kwargs):
        seen["prompt"], seen["completion"] = list(tokens), []
        for token in original(tokens, *args, **kwargs):
            seen["completion"].append(token)
            yield token

    replies = []
    for messages, want in zip(chats, ids):
        llm.generate = recording  # the chat API's own call of generate(), recorded; the continuation below is not
        reply = llm.create_chat_completion(messages, max_tokens=NEW_TOKENS, temperature=0.0)
        del llm.generate
        prompt, completion = seen["prompt"], seen["completion"]  # the answer, and its end token if one came
        if completion and ends_answer(llm, completion[-1]):
            completion = completion[:-1]
        direct = continuation(llm, want)
        replies.append(
            {
                "usage": reply["usage"],
                "content": reply["choices"][0]["message"]["content"],
                "prompt_ids": prompt,
                "completion_ids": completion,
                "direct": direct,
                "direct_text": llm.detokenize(direct).decode(errors="ignore"),
            }
        )
    return {"template": llm.metadata["tokenizer.chat_template"], "format": llm.chat_format, "replies": replies}


def _scores(llm, ids: list[int]) -> np.ndarray:
    """llama.cpp's logits along `ids` (one row a position), copied: llm.scores is overwritten by the next eval."""
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32, copy=True)


def answers_and_scores(path, prompts: list[list[int]], expected: list[list[int]]) -> list[tuple[list[int], np.ndarray]]:
    """For each prompt: llama.cpp's greedy answer (NEW_TOKENS tokens), and its logits along prompt + transformers'
    answer (causal: the logits along any prefix of it are the first rows)."""
    llm = _llama(path)
    out = []
    for ids, answer in zip(prompts, expected):
        got = [t for t, _ in zip(llm.generate(ids, temp=0.0, reset=True), range(NEW_TOKENS))]
        out.append((got, _scores(llm, ids + answer)))
    return out


def scores_along(path, prompts: list[list[int]]) -> list[np.ndarray]:
    llm = _llama(path)
    return [_scores(llm, ids) for ids in prompts]
