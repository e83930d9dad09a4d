"""Turn the Qwen2.5-Coder-0.5B-Instruct GGUF (../shared/gpu/real-model.sh) into a Hugging Face model folder of
Qwen2.5-0.5B-Instruct's exact shape: fp32, tied embeddings, and the Qwen2.5 tokenizer files from
../shared/data/qwen2.5-0.5b-instruct (eos <|im_end|>; the GGUF's own tokenizer says <|endoftext|>, which makes every
chat answer run to the length limit).

    python bench/device/gguf_to_hf.py --gguf /tmp/model.gguf --tokenizer .gpu-shared/qwen2.5-0.5b-instruct \\
        --out /tmp/qwen-real
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "generation_config.json")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--tokenizer", required=True, help="folder with the real Qwen2.5 tokenizer files and config")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    gguf = Path(args.gguf)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32)
    reference = AutoConfig.from_pretrained(args.tokenizer)
    lm_head = model.get_output_embeddings().weight.data.clone()  # Q8_0 in this GGUF: the more precise copy
    model.config.tie_word_embeddings = True
    model.get_input_embeddings().weight.data.copy_(lm_head)
    model.tie_weights()
    for key in (
        "bos_token_id",
        "eos_token_id",
        "max_position_embeddings",
        "rope_theta",
        "sliding_window",
        "max_window_layers",
        "use_sliding_window",
    ):
        if hasattr(reference, key):
            setattr(model.config, key, getattr(reference, key))
    params = sum(p.numel() for p in model.parameters())
    shape_keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
    )
    mismatch = {
        k: (getattr(model.config, k), getattr(reference, k))
        for k in shape_keys
        if getattr(model.config, k) != getattr(reference, k)
    }
    if mismatch:
        raise SystemExit(f"not the Qwen2.5-0.5B shape: {mismatch}")
    out = Path(args.out)
    model.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(Path(args.tokenizer) / name, out / name)
    print(f"{params / 1e6:.2f}M parameters (tied), saved to {out}")


if __name__ == "__main__":
    main()
