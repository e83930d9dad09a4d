"""Run verl's HF rollout on a CPU model and compare it with plain `generate()` (used by test_patches.py).

Usage: python hf_rollout_probe.py MODEL_DIR [P40_DECODE]   (with the verl copy under test first on PYTHONPATH)
Prints JSON: for greedy and for sampling, whether the rollout's tokens equal `generate()`'s with the configured
settings and positions transformers derives from the attention mask; P40_DECODE sets the rollout's p40_decode
(patches/p40_decode.py; absent: verl's own generate() call), and `said` holds what the decoder printed. The
model's generation_config is given Qwen2.5-Instruct's published defaults (temperature 0.7, top_p 0.8, top_k 20,
repetition_penalty 1.05).
"""

import json
import sys

import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto
from verl.workers.rollout.hf_rollout import HFRollout

RESPONSE_LENGTH = 16
if not hasattr(torch.cpu, "empty_cache"):  # verl empties the device cache after generating; a no-op on a CPU
    torch.cpu.empty_cache = lambda: None


def main(model_dir: str, decode: str | None = None) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    model.generation_config.update(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)
    prompts = tokenizer(["one two three four five six seven eight", "hello"], return_tensors="pt", padding=True)
    positions = (prompts.attention_mask.cumsum(-1) - 1).clamp(min=0)  # verl's left-padded position_ids
    special = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    result = {}
    for mode, do_sample in (("greedy", False), ("sample", True)):
        config = OmegaConf.create(
            {
                "micro_batch_size": 2,
                "response_length": RESPONSE_LENGTH,
                "do_sample": do_sample,
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": -1,
                "n": 1,
                "dtype": "float32",
                "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0.0, "n": 1},
                **({"p40_decode": decode} if decode else {}),
            }
        )
        batch = DataProto.from_dict(
            tensors={
                "input_ids": prompts.input_ids,
                "attention_mask": prompts.attention_mask,
                "position_ids": positions,
            },
            meta_info=dict(special),
        )
        torch.manual_seed(0)
        rollout = HFRollout(model, config).generate_sequences(batch).batch["responses"]
        sampling = (
            {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0} if do_sample else {"do_sample": False}
        )
        torch.manual_seed(0)
        with torch.no_grad():
            plain = model.generate(
                **prompts, max_new_tokens=RESPONSE_LENGTH, repetition_penalty=1.0, **sampling, **special
            )
        plain = plain[:, prompts.input_ids.shape[1] :]
        result[mode] = {
            "equal": torch.equal(rollout[:, : plain.shape[1]], plain),
            "rollout": rollout.tolist(),
            "generate": plain.tolist(),
        }
    # GRPO-style: rollout.n = 4, and the prompts already repeated 4 times each, as verl's trainer hands them over
    n = 4
    config = OmegaConf.create(
        {
            "micro_batch_size": 8,
            "response_length": RESPONSE_LENGTH,
            "do_sample": True,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "n": n,
            "dtype": "float32",
            "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0.0, "n": 1},
            **({"p40_decode": decode} if decode else {}),
        }
    )
    repeated = {
        k: v.repeat_interleave(n, dim=0)
        for k, v in {
            "input_ids": prompts.input_ids,
            "attention_mask": prompts.attention_mask,
            "position_ids": positions,
        }.items()
    }
    batch = DataProto.from_dict(tensors=repeated, meta_info=dict(special))
    out = HFRollout(model, config).generate_sequences(batch)
    result["grpo"] = {
        "prompts": 2,
        "n": n,
        "sequences": int(out.batch.batch_size[0]),
        "distinct_per_prompt": [
            len({tuple(r) for r in out.batch["responses"][i * n : (i + 1) * n].tolist()}) for i in range(2)
        ],
    }
    # validation-like: 5 sequences at micro_batch_size 2 (verl 0.5.0 asserted an equal split of 5 // 2 = 2 chunks)
    config = OmegaConf.create({**OmegaConf.to_container(config), "micro_batch_size": 2, "do_sample": False, "n": 1})
    rows = torch.tensor([0, 1, 0, 1, 0])
    batch = DataProto.from_dict(
        tensors={
            "input_ids": prompts.input_ids[rows],
            "attention_mask": prompts.attention_mask[rows],
            "position_ids": positions[rows],
        },
        meta_info=dict(special),
    )
    pieces, piece = [], HFRollout._generate_minibatch
    HFRollout._generate_minibatch = lambda self, p: pieces.append(len(p)) or piece(self, p)
    out = HFRollout(model, config).generate_sequences(batch).batch["responses"]
    HFRollout._generate_minibatch = piece
    greedy = torch.tensor(result["greedy"]["rollout"])
    result["uneven"] = {
        "sequences": int(out.shape[0]),
        "pieces": pieces,
        "greedy_rows_equal": torch.equal(out, greedy[rows]),
    }
    if decode:
        from verl.utils import p40_decode

        result["said"] = sorted(p40_decode._said)
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:3])
