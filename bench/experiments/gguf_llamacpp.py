"""Issue 62: do the exported GGUF files answer in llama.cpp as the checkpoint does? (CPU, real weights.)

The real-weights stand-in (Qwen2.5-Coder-0.5B-Instruct in Qwen2.5-0.5B-Instruct's shape, bench/device/gguf_to_hf.py)
exported by the product's CLI (`verl-p40 export --dtype fp32 --gguf f16,q8_0`, and `--dtype fp16`), then:
- token ids: llama.cpp's tokenizer (llama-cpp-python, the file's vocabulary) against Qwen2.5's Hugging Face tokenizer
  on the chat-formatted prompts (the GSM8K questions as `verl-p40 prep` writes them, and prompts in Chinese);
- chat template: the file's `tokenizer.chat_template` against the checkpoint's, and the format llama-cpp-python's
  chat API takes from it;
- greedy answers: llama.cpp's chat API (temperature 0) on the f16 and q8_0 files against transformers' greedy answers
  from the exported fp32 folder, and the fp16 folder's (read in fp32: the export's rounding alone); where two differ,
  the first differing token and the fp32 model's margin between its top two tokens there;
- logits: llama.cpp's against transformers' fp32 along the prompt and the fp32 answer.

    python3 bench/experiments/gguf_llamacpp.py --gguf ~/.cache/verl-p40-real-model/qwen2.5-coder-0.5b-instruct.gguf \\
        --tokenizer ../shared/data/qwen2.5-0.5b-instruct --gsm8k ../shared/data/gsm8k \\
        --out bench/results/gguf-llamacpp-2026-12-04
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from importlib.metadata import version
from pathlib import Path

from lib.answers import first_divergence
from lib.real_runs import cli, real_model, run

CHINESE = [  # chat-formatted prompts with Chinese, digits and runs of spaces: where pre-tokenizers differ, ids do
    [{"role": "user", "content": "小明有 12 个苹果，吃了 3 个，又买了 1024 个。他现在有几个苹果？请一步一步思考。"}],
    [
        {"role": "system", "content": "你是一个数学老师。"},
        {"role": "user", "content": "2024年5月，  一件衣服 ¥199.50，打八折后多少钱？\n\n答案写在 #### 之后。"},
    ],
]
META = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id")
META += ("tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "general.file_type")


def gsm8k_chats(folder: Path, count: int) -> list[list[dict]]:
    from verl_p40.data.gsm8k import make_row

    lines = (folder / "test.jsonl").read_text(encoding="utf-8").splitlines()[:count]
    rows = [json.loads(line) for line in lines]
    return [make_row(r["question"], r["answer"], "test", i)["prompt"] for i, r in enumerate(rows)]


def hf_greedy(folder: Path, prompts: list[list[int]], new_tokens: int, stop: list[int]) -> tuple[list, float]:
    """transformers' greedy answers (token ids) from `folder`, read in fp32, and the seconds they took (kept beside
    the folder: a run again after a failure later on does not generate them again)."""
    import torch
    from transformers import AutoModelForCausalLM

    kept = folder.parent / f"greedy-{len(prompts)}-{new_tokens}.json"
    if kept.is_file():
        return tuple(json.loads(kept.read_text()))
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    start, out = time.time(), []
    for ids in prompts:
        with torch.no_grad():
            seq = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False, eos_token_id=stop)
        answer = seq[0, len(ids) :].tolist()
        out.append(answer[:-1] if answer and answer[-1] in stop else answer)
        print(f"  {folder.name}: {len(out)}/{len(prompts)} ({len(answer)} tokens)", flush=True)
    kept.write_text(json.dumps([out, round(time.time() - start, 1)]))
    return out, round(time.time() - start, 1)


def margin(model, ids: list[int]) -> dict:
    """The fp32 model's top two next tokens after `ids` and the gap between their logits."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1]
    top = torch.topk(logits, 2)
    return {"top2": top.indices.tolist(), "logit_gap": round(float(top.values[0] - top.values[1]), 4)}


def compare(name: str, reference: list[list[int]], other: list[list[int]], tokenizer, model, prompts) -> dict:
    """How `other`'s answers agree with the fp32 export's: the same tokens, the same final number, and for each
    differing answer where it parts (token index, text) and the fp32 model's margin there."""
    from verl_p40.reward import extract_answer

    rows = []
    for ids, ref, got in zip(prompts, reference, other):
        a, b = tokenizer.decode(ref), tokenizer.decode(got)
        row = {"same_tokens": ref == got, "tokens": [len(ref), len(got)]}
        row["final_number"] = [extract_answer(a, "flexible"), extract_answer(b, "flexible")]
        if ref != got:
            at = next((k for k, (x, y) in enumerate(zip(ref, got)) if x != y), min(len(ref), len(got)))
            _, before, ours, theirs = first_divergence(a, b, 60, 40)
            row["first_difference"] = {"token": at, "before": before, "fp32": ours, name: theirs}
            row["first_difference"]["fp32_margin"] = margin(model, ids + ref[:at])
        rows.append(row)
    same = sum(r["same_tokens"] for r in rows)
    numbers = sum(r["final_number"][0] == r["final_number"][1] for r in rows)
    return {"same_tokens": same, "same_final_number": numbers, "answers": len(rows), "per_answer": rows}


def llama_file(path: Path, tokenizer, chats: list, prompts: list, new_tokens: int, reference: list, model) -> dict:
    """One GGUF file in llama.cpp: its metadata, token ids, chat template, chat-API answers and logits."""
    import numpy as np
    import torch
    from llama_cpp import Llama

    llm = Llama(str(path), n_ctx=2048, n_threads=2, logits_all=True, verbose=False)
    meta = llm.metadata
    out = {"metadata": {k: meta.get(k) for k in META}, "chat_format": llm.chat_format}
    out["chat_template_is_checkpoints"] = meta.get("tokenizer.chat_template") == tokenizer.chat_template
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    same = [llm.tokenize(t.encode(), add_bos=True, special=True) == ids for t, ids in zip(texts, prompts)]
    out["token_ids_same"] = {"prompts": len(same), "same": sum(same), "chinese_prompts_same": same[-len(CHINESE) :]}
    answers, used, start = [], [], time.time()
    for chat in chats[: len(reference)]:
        reply = llm.create_chat_completion(chat, max_tokens=new_tokens, temperature=0.0)
        answers.append(tokenizer(reply["choices"][0]["message"]["content"]).input_ids)
        used.append(reply["usage"]["prompt_tokens"])
        print(f"  {path.name}: {len(answers)}/{len(reference)}", flush=True)
    out["chat_api_seconds"] = round(time.time() - start, 1)
    out["chat_api_prompt_tokens_as_hf"] = used == [len(p) for p in prompts[: len(reference)]]
    out["answers"] = answers
    logits = []
    for ids, ref in zip(prompts[:2], reference[:2]):  # along the prompt and the fp32 answer: two questions
        full = ids + ref
        llm.reset()
        llm.eval(full)
        ours = np.asarray(llm.scores[: len(full)], dtype=np.float32)
        with torch.no_grad():
            theirs = model(torch.tensor([full])).logits[0].numpy()
        spread = float(theirs.max() - theirs.min())
        logits.append(
            {
                "positions": len(full),
                "max_abs_diff": round(float(np.abs(ours - theirs).max()), 4),
                "max_abs_diff_over_spread": round(float(np.abs(ours - theirs).max()) / spread, 5),
                "same_top1": round(float((ours.argmax(-1) == theirs.argmax(-1)).mean()), 4),
            }
        )
    out["logits_vs_hf_fp32"] = logits
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", required=True, help="the stand-in's GGUF (../shared/gpu/real-model.sh)")
    parser.add_argument("--tokenizer", required=True, help="Qwen2.5-0.5B-Instruct's tokenizer and config")
    parser.add_argument("--gsm8k", type=Path, required=True, help="a folder with GSM8K's test.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gguf-llamacpp"))
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=320)
    parser.add_argument("--no-fp16", action="store_true", help="leave out the fp16 export's answers (CPU time)")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.work / "qwen-real"
    real_model(args.gguf, args.tokenizer, model)
    timings = {}
    for dtype, extra in (("fp32", ["--gguf", "f16,q8_0"]), ("fp16", []))[: 1 if args.no_fp16 else 2]:
        kept = args.work / f"export-{dtype}-seconds"  # exported by a run before this one
        if not kept.is_file():
            start = time.time()
            run(cli("export", "--model", str(model), "--out", str(args.work / dtype), "--dtype", dtype, *extra))
            kept.write_text(f"{time.time() - start:.1f}")
        timings[f"export_{dtype}_seconds"] = float(kept.read_text())
    fp32, fp16 = args.work / "fp32" / "qwen-real-hf-fp32", args.work / "fp16" / "qwen-real-hf-fp16"
    tokenizer = AutoTokenizer.from_pretrained(fp32)
    chats = gsm8k_chats(args.gsm8k, args.questions) + CHINESE
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True) for c in chats]
    stop = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    questions = prompts[: args.questions]
    reference, timings["hf_fp32_seconds"] = hf_greedy(fp32, questions, args.new_tokens, stop)
    if not args.no_fp16:
        from_fp16, timings["hf_fp16_read_in_fp32_seconds"] = hf_greedy(fp16, questions, args.new_tokens, stop)
    hf = AutoModelForCausalLM.from_pretrained(fp32, torch_dtype=torch.float32).eval()
    result = {
        "command": "python3 " + shlex.join(sys.argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other work; 2 threads each",
        "packages": {p: version(p) for p in ("llama_cpp_python", "transformers", "torch", "gguf")},
        "questions": args.questions,
        "max_new_tokens": args.new_tokens,
        "checkpoint_chat_template_is_qwen25": tokenizer.chat_template
        == AutoTokenizer.from_pretrained(args.tokenizer).chat_template,
        "files_mib": {p.name: round(p.stat().st_size / 2**20, 1) for p in sorted((args.work / "fp32").glob("*.gguf"))},
        "hf_fp16_vs_fp32": None if args.no_fp16 else compare("fp16", reference, from_fp16, tokenizer, hf, questions),
        "gguf": {},
    }
    for kind in ("f16", "q8_0"):
        path = args.work / "fp32" / f"qwen-real-{kind}.gguf"
        found = llama_file(path, tokenizer, chats, prompts, args.new_tokens, reference, hf)
        answers = found.pop("answers")
        found["answers_vs_hf_fp32"] = compare(kind, reference, answers, tokenizer, hf, questions)
        result["gguf"][kind] = found
    result["seconds"] = timings
    result["answers_hf_fp32"] = [tokenizer.decode(a) for a in reference]
    (args.out / "result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "answers_hf_fp32"}, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
