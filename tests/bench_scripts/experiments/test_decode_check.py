"""The GPU check of the rollout's decoder (bench/experiments/decode_check.py), run here on a CPU (--cpu: no FSDP1,
which refuses a CPU; no CUDA graph): verl's patched HF rollout decodes GSM8K's prepared prompts with generate() and
with the decoder, and the check reports both runs and how many answers are generate()'s, token for token."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_check_compares_the_decoder_with_generate(patched_verl, prepared, tokenizer_dir, tmp_path):
    from conftest import make_tiny_qwen

    model = make_tiny_qwen(tokenizer_dir, tmp_path / "model", initializer_range=1.0)
    env = {**os.environ, "PYTHONPATH": f"{patched_verl}{os.pathsep}{REPO / 'app'}", "HF_HUB_OFFLINE": "1"}
    env["MASTER_PORT"] = str(29000 + os.getpid() % 1000)
    command = [sys.executable, str(REPO / "bench" / "experiments" / "decode_check.py"), "--cpu", "--model", str(model)]
    command += ["--data", str(prepared / "test.parquet"), "--questions", "6", "--new-tokens", "12"]
    command += ["--modes", "off,eager,compact,grouped", "--out", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "decode-check.json").read_text())
    assert set(report["runs"]) == {"off", "eager", "compact", "grouped"} and report["questions"] == 6
    eager, compact = report["runs"]["eager"], report["runs"]["compact"]
    assert eager["against_generate"]["identical"] == eager["against_generate"]["compared"] == 6, eager
    assert compact["against_generate"]["identical"] == 6, compact  # ended rows leaving the batch: the same answers
    grouped = report["runs"]["grouped"]  # and the prompt passes by length (p40_prefill_groups)
    assert grouped["against_generate"]["identical"] == 6, grouped
    assert report["runs"]["off"]["decoded_row_steps"] is None  # generate() counts none
    # the prompt passes' rows x columns: verl's padded width, the longest prompt, each group's longest prompt
    assert 0 < grouped["prompt_tokens"] < compact["prompt_tokens"] < eager["prompt_tokens"], report["runs"]
    assert 0 < compact["decoded_row_steps"] <= eager["decoded_row_steps"] == 6 * eager["decoding_steps"]
    assert eager["first_64"] == {"identical": 6, "compared": 6}
    assert report["runs"]["off"]["generated_tokens"] == eager["generated_tokens"] > 0
    assert eager["p40_gpu_ms_per_decoding_step"] > 0 and eager["decoding_steps"] <= 12
    assert "static KV cache (p40_decode=eager)" in result.stdout  # the decoder ran, not generate() twice
    assert "padding cut and ended rows leaving the batch (p40_decode=graph)" in result.stdout
