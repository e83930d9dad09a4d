"""`verl-p40 export`: Hugging Face folders in fp32 and fp16, and GGUF files, round-tripped on a CPU."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO, make_tiny_qwen
from verl_p40.models import export
from verl_p40.outputs import LEDGER

PROMPT = [
    [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]
]  # chat-formatted "What is 2+2?"


@pytest.fixture(scope="module")
def tiny(tokenizer_dir, tmp_path_factory):
    return make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp("export") / "tiny")


def _logits(folder, **kwargs):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, **kwargs).eval()
    with torch.no_grad():
        return model(torch.tensor(PROMPT)).logits


def test_hf_fp32_is_exact_and_fp16_is_within_its_precision(tiny, tmp_path):
    reference = _logits(tiny)
    fp32 = export.hf_folder(tiny, tmp_path / "fp32", "fp32")
    assert torch.equal(_logits(fp32), reference)
    fp16 = export.hf_folder(tiny, tmp_path / "fp16", "fp16")
    assert json.loads((fp16 / "config.json").read_text())["torch_dtype"] == "float16"
    # fp16 weights (10-bit mantissa): logits within 1e-3 of the fp32 model's at this model's scale
    assert (_logits(fp16) - reference).abs().max() < 1e-3
    from transformers import AutoTokenizer

    chat = AutoTokenizer.from_pretrained(fp16).apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in chat  # the tokenizer and its chat template came along


def test_gguf_f16_reads_back_with_the_same_tensors_and_close_logits(tiny, tmp_path):
    import gguf
    from safetensors.torch import load_file

    path = export.gguf_file(tiny, tmp_path / "tiny-f16.gguf", "f16")
    reader = gguf.GGUFReader(path)
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "qwen2"
    assert "tokenizer.chat_template" in fields and "tokenizer.ggml.merges" in fields
    tensors = {t.name: t for t in reader.tensors}
    source = load_file(tiny / "model.safetensors")
    assert "output.weight" not in tensors  # tied embeddings: llama.cpp uses token_embd
    q = tensors["blk.0.attn_q.weight"]
    assert q.tensor_type == gguf.GGMLQuantizationType.F16
    np.testing.assert_array_equal(
        np.asarray(q.data).reshape(source["model.layers.0.self_attn.q_proj.weight"].shape),
        source["model.layers.0.self_attn.q_proj.weight"].half().numpy(),
    )
    assert tensors["output_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    # transformers' own GGUF loader (dequantizes to fp32) gives the fp16 model's logits
    loaded = _logits(tmp_path, gguf_file=path.name)
    assert (loaded - _logits(tiny)).abs().max() < 1e-3


def test_gguf_q8_0_loads_back_close(tiny, tmp_path):
    import gguf

    path = export.gguf_file(tiny, tmp_path / "tiny-q8_0.gguf", "q8_0")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    reference = _logits(tiny)
    loaded = _logits(tmp_path, gguf_file=path.name)
    # 8-bit blocks: the same next token, logits within 5 % of their spread
    assert torch.equal(loaded[0, -1].argmax(), reference[0, -1].argmax())
    assert (loaded - reference).abs().max() < 0.05 * (reference.max() - reference.min())


def test_export_command_and_its_errors(tiny, tmp_path):
    out = tmp_path / "exports"
    result = subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "export", "--model", str(tiny), "--out", str(out), "--gguf", "q8_0"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [LEDGER, "tiny-hf-fp16", "tiny-q8_0.gguf"]
    bad = subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "export", "--model", str(tiny), "--out", str(out), "--gguf", "q4_k"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "verl-p40 export: error: --gguf q4_k: not one of f16, q8_0"
    ]
    adapter = subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "export", "--model", str(tiny), "--out", str(out), "--lora", "adapter"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert adapter.returncode == 2 and "no LoRA adapter here" in adapter.stderr and "Traceback" not in adapter.stderr
    assert sorted(p.name for p in out.iterdir()) == [LEDGER, "tiny-hf-fp16", "tiny-q8_0.gguf"]  # nothing half-written


def _export(*args):
    return subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "export", *map(str, args)], capture_output=True, text=True, cwd=REPO
    )


def test_exporting_again_replaces_its_own_outputs_and_nothing_else(tiny, tmp_path):
    """The normal case: export into the folder of the last export. Its own outputs are replaced whole; a user's file
    beside them stays; an output a user changed since, or a user's folder of an output's name, stops it first."""
    out = tmp_path / "exports"
    once = _export("--model", tiny, "--out", out, "--gguf", "f16,f16")  # a kind named twice is written once
    assert once.returncode == 0 and once.stdout.count("tiny-f16.gguf") == 1, once.stdout + once.stderr
    (out / "notes.txt").write_text("mine")
    first = (out / "tiny-f16.gguf").stat().st_mtime_ns
    again = _export("--model", tiny, "--out", out, "--gguf", "f16")
    assert again.returncode == 0, again.stderr
    assert (out / "tiny-f16.gguf").stat().st_mtime_ns != first and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == [LEDGER, "notes.txt", "tiny-f16.gguf", "tiny-hf-fp16"]
    (out / "tiny-hf-fp16" / "README.md").write_text("my model card")
    edited = _export("--model", tiny, "--out", out, "--dtype", "fp16")
    assert edited.returncode == 2 and edited.stderr.strip().splitlines() == [
        f"verl-p40 export: error: {out / 'tiny-hf-fp16' / 'README.md'}: not written by verl-p40 export, and "
        "tiny-hf-fp16 would be replaced; move it away, or choose another --out"
    ]
    assert (out / "tiny-hf-fp16" / "README.md").read_text() == "my model card"
    theirs = tmp_path / "theirs"
    (theirs / "tiny-hf-fp32").mkdir(parents=True)
    (theirs / "tiny-hf-fp32" / "model.safetensors").write_bytes(b"someone else's")
    refused = _export("--model", tiny, "--out", theirs, "--dtype", "fp32")
    assert refused.returncode == 2
    assert "tiny-hf-fp32: already there and not written by verl-p40 export" in refused.stderr
    assert [p.name for p in theirs.iterdir()] == ["tiny-hf-fp32"]
