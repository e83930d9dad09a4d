"""Small model folders for the tests of model verification (`verl_p40.models.verify`): a complete Qwen2-shaped
folder in a few kilobytes (random weights, stand-in tokenizer files), and the ways one goes wrong. Nothing here loads
in transformers; these folders are for what must be refused before anything is loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 64,
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def tensors(config: dict) -> dict[str, np.ndarray]:
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    out = {"model.embed_tokens.weight": np.ones((config["vocab_size"], hidden), np.float32)}
    for layer in range(config["num_hidden_layers"]):
        out[f"model.layers.{layer}.self_attn.q_proj.weight"] = np.ones((hidden, hidden), np.float32)
        out[f"model.layers.{layer}.mlp.gate_proj.weight"] = np.ones((inter, hidden), np.float32)
        out[f"model.layers.{layer}.input_layernorm.weight"] = np.ones(hidden, np.float32)
    out["model.norm.weight"] = np.ones(hidden, np.float32)
    return out


def small_model(folder: Path, weights: dict | None = None, shards: int = 1, **config) -> Path:
    """A complete folder (as `verify` judges it); `config` overrides config.json's values, `weights` the tensors."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    config = {**CONFIG, **config}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "generation_config.json").write_text('{"eos_token_id": 1}\n')
    for name in ("tokenizer_config.json", "tokenizer.json"):
        (folder / name).write_text("{}\n")
    weights = tensors(CONFIG) if weights is None else weights
    if shards == 1:
        save_file(weights, str(folder / "model.safetensors"))
        return folder
    names = sorted(weights)
    weight_map = {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: weights[name] for name in names[i::shards]}
        save_file(part, str(folder / shard))
        weight_map |= dict.fromkeys(part, shard)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def copy_of(good: Path, folder: Path) -> Path:
    shutil.copytree(good, folder)
    return folder


def cut_short(folder: Path, name: str = "model.safetensors", by: int = 100) -> Path:
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[:-by])
    return folder
