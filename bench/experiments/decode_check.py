"""The rollout's decoder (patches/p40_decode.py) on the GPU (issue 41): verl's own HF rollout on an FSDP1-wrapped actor,
as the trainer runs it, decoding the test split's first questions greedily with transformers' generate()
(`p40_decode=off`, the rollout before the decoder) and with the decoder (`graph`: a static KV cache and one CUDA graph
a token; `eager`: the same without the graph), one model load: each decoder's time, generated tokens a second and
time a decoding step, beside the P40's GPU time for that step (perf/projection.py), and every answer compared with
generate()'s token for token, the first divergence shown as text.

Run it under the Pascal mask with the product's 24 GB cap for the P40 path (the op audit records what the decoder
runs when PASCAL_MASK_AUDIT is set):

    PYTHONPATH=/tmp/pascal-mask:$PYTHONPATH PASCAL_MASK=1 VERL_P40_GPU_MEMORY_CAP_GB=24 \\
      python3 bench/experiments/decode_check.py --model /tmp/qwen-real --data /tmp/gsm8k/test.parquet \\
      --questions 256 --out $OUT/decode
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ORDER = ("off", "graph", "eager", "compact", "grouped")  # generate() first: every other is compared with its answers
# `compact` (added 2026-12-06): graph with p40_decode_compact (ended rows leave the batch every 16 tokens); `grouped`
# (2026-12-07): compact with the prompt passes by length, PREFILL_GROUPS of them (p40_prefill_groups)
PREFILL_GROUPS = 8


def compare(reference, other, tokenizer) -> dict:
    """Rows whose tokens are generate()'s, and the first row that differs: where, and both continuations."""
    same = [bool((a == b).all()) for a, b in zip(reference, other)]
    out = {"identical": sum(same), "compared": len(same), "differing_rows": [i for i, s in enumerate(same) if not s]}
    if out["differing_rows"]:
        row = out["differing_rows"][0]
        a, b = reference[row].tolist(), other[row].tolist()
        at = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        out["first_divergence"] = {
            "row": row,
            "token": at,
            "common": tokenizer.decode(a[max(0, at - 40) : at], skip_special_tokens=True),
            "generate_continues": tokenizer.decode(a[at : at + 40], skip_special_tokens=True),
            "decoder_continues": tokenizer.decode(b[at : at + 40], skip_special_tokens=True),
        }
    return out


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="a prepared split (verl-p40 prep's test.parquet)")
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--prompt-width", type=int, default=320)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--modes", default="off,graph")
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true", help="a CPU check of this script: no FSDP1 (it refuses a CPU)")
    return parser.parse_args()


def _greedy(args: argparse.Namespace, mode: str):
    """verl's HF rollout config for greedy answers decoded by `mode` (p40_decode)."""
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "micro_batch_size": args.questions,
            "response_length": args.new_tokens,
            "do_sample": False,
            "n": 1,
            "dtype": "float32",
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0.0, "n": 1},
            "p40_decode": "graph" if mode in ("compact", "grouped") else mode,
            "p40_decode_compact": mode in ("compact", "grouped"),
            "p40_prefill_groups": PREFILL_GROUPS if mode == "grouped" else 1,
        }
    )


def _decode(loaded, batch, args: argparse.Namespace, mode: str):
    """(the answers, the run's times and tokens) of verl's HF rollout decoding `batch` with `mode`."""
    import torch
    from verl.workers.rollout.hf_rollout import HFRollout

    from verl_p40.perf import projection

    loaded.sync()
    if not args.cpu:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    out = HFRollout(loaded.module, _greedy(args, mode)).generate_sequences(batch)
    loaded.sync()
    seconds = time.perf_counter() - started
    lengths = (out.batch["attention_mask"][:, args.prompt_width :].sum(-1)).float()
    steps = float(lengths.max())
    from verl.utils.p40_decode import take_rows  # the rows x decoding steps the decoder ran (none for generate())

    counted = take_rows()
    rows = counted.get("perf/p40_tokens/rollout_decode")
    shape = projection.Shape.from_config(loaded.model.config.to_dict())
    run = projection.Run(
        args.questions, args.prompt_width, args.new_tokens, steps, False, False, False, {}, tokens={"gen": rows}
    )
    _, p40_step = projection.generation_gpu_seconds(shape, run, projection.P40)
    return out.batch["responses"].cpu(), {
        "seconds": round(seconds, 2),
        "generated_tokens": int(lengths.sum()),
        "tokens_per_s": round(float(lengths.sum()) / seconds, 1),
        "decoding_steps": int(steps),
        "ms_per_decoding_step": round(1000 * seconds / steps, 2),
        "prompt_tokens": counted.get("perf/p40_tokens/rollout_prefill"),  # the prompt passes' rows x columns
        "p40_gpu_ms_per_decoding_step": round(1000 * p40_step, 2),
        "torch_max_allocated_gb": None if args.cpu else round(torch.cuda.max_memory_allocated() / 1e9, 2),
        "mean_answer_tokens": round(float(lengths.mean()), 1),
        "decoded_row_steps": rows,
        "p40_gpu_seconds_decoding": round(p40_step * steps, 2),
    }


def main() -> None:
    args = _arguments()
    from verl import DataProto

    from lib.rollout_actor import load, prompts, save

    loaded = load(args.model, args.cpu, "29561")
    tokenizer = loaded.tokenizer
    input_ids, attention_mask, positions = prompts(tokenizer, args.data, args.questions, args.prompt_width)
    batch = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": positions},
        meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id, "do_sample": False},
    ).to(loaded.device)
    result = {**loaded.describe(args.questions, args.new_tokens), "runs": {}}
    answers = {}
    for mode in [m for m in ORDER if m in args.modes.split(",")]:
        answers[mode], result["runs"][mode] = _decode(loaded, batch, args, mode)
        if mode != "off" and "off" in answers:
            result["runs"][mode]["against_generate"] = compare(answers["off"], answers[mode], tokenizer)
            first = compare(answers["off"][:64], answers[mode][:64], tokenizer)
            result["runs"][mode]["first_64"] = {k: first[k] for k in ("identical", "compared")}
        print(json.dumps({mode: result["runs"][mode]}), flush=True)
    save(result, args.out, "decode-check.json")


if __name__ == "__main__":
    main()
