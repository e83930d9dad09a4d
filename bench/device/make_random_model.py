"""Build a model of Qwen2.5-0.5B-Instruct's exact architecture with random weights (no hub needed).

    python bench/device/make_random_model.py --config ../shared/data/qwen2.5-0.5b-instruct --out /tmp/qwen-random

The config and tokenizer files are the real ones; the weights are `from_config` random init (seeded), fp32.
"""

import argparse
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "generation_config.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="folder with config.json and the tokenizer files")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    config = AutoConfig.from_pretrained(args.config)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    out = Path(args.out)
    model.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(args.config) / name).is_file():
            shutil.copy(Path(args.config) / name, out / name)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters -> {out}")


if __name__ == "__main__":
    main()
