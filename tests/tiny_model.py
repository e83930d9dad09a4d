"""A tiny Qwen2 for tests that run the real code paths fast: imported by conftest.py, and run as a script inside the
image by docker/e2e/run.sh (no pytest there), so that the model folder is written by the image's own transformers.

    python tests/tiny_model.py TOKENIZER_DIR OUT_DIR [INITIALIZER_RANGE]
"""

from __future__ import annotations

import sys
from pathlib import Path


def make_tiny_qwen(
    tokenizer_dir: Path, folder: Path, seed: int = 0, initializer_range: float = 0.02, eos_scale: float = 1.0
) -> Path:
    """A randomly initialised 2-layer Qwen2 with the real Qwen2.5 tokenizer (runs in seconds on a CPU).

    A large initializer_range makes attention (and so token positions) matter to the next token. eos_scale > 1
    scales the end-of-answer token's (tied) embedding, so that sampled answers end at different lengths before a
    short limit (with initializer_range 1.0 and 16 new tokens: 6 to 8 is what makes them end at several lengths)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        initializer_range=initializer_range,
    )
    model = Qwen2ForCausalLM(config)
    if eos_scale != 1.0:
        with torch.no_grad():
            model.get_input_embeddings().weight[tokenizer.eos_token_id] *= eos_scale
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


if __name__ == "__main__":
    scale = float(sys.argv[3]) if len(sys.argv) > 3 else 0.02
    print(make_tiny_qwen(Path(sys.argv[1]), Path(sys.argv[2]), initializer_range=scale))
