"""Model-folder verification reads what it certifies: safetensors headers against the files' sizes, the index's weight
map against the shards, every JSON file parsed, config.json's shape against the weights'. Each problem names the file
(and the key and both values for a shape that does not match)."""

import json
import os
import struct
import time

import pytest

from model_folders import CONFIG, copy_of, cut_short, small_model, tensors
from verl_p40.models import verify


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return small_model(tmp_path_factory.mktemp("verify") / "good")


def raw_safetensors(path, header: dict, data_bytes: int) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * data_bytes)


def test_a_complete_folder_passes_and_its_parameters_come_from_the_headers(good, tmp_path):
    assert verify.problems(good) == []
    assert verify.parameters(good) == sum(t.size for t in tensors(CONFIG).values())
    sharded = small_model(tmp_path / "sharded", shards=2)
    assert verify.problems(sharded) == [] and verify.parameters(sharded) == verify.parameters(good)


def test_the_real_tiny_qwen_passes(tiny_model):
    assert verify.problems(tiny_model) == []


def _config(folder, **change):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}, indent=2))


def _drop(folder, key):
    config = json.loads((folder / "config.json").read_text())
    del config[key]
    (folder / "config.json").write_text(json.dumps(config, indent=2))


DAMAGE = {
    "cut-short": (
        lambda f: cut_short(f),
        "model.safetensors: cut short (4332 bytes, its header needs 4432); copy or fetch it again",
    ),
    "empty": (lambda f: (f / "model.safetensors").write_bytes(b""), "model.safetensors: empty"),
    "tiny": (lambda f: (f / "model.safetensors").write_bytes(b"\x01\x02"), "2 bytes, too short for a safetensors"),
    "header-length": (
        lambda f: (f / "model.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}"),
        "model.safetensors: not a safetensors file or cut short (its header says 1099511627776 bytes, the file has 10)",
    ),
    "header-not-json": (
        lambda f: (f / "model.safetensors").write_bytes(struct.pack("<Q", 4) + b"{no}"),
        "model.safetensors: its safetensors header is not JSON",
    ),
    "header-malformed": (
        lambda f: raw_safetensors(f / "model.safetensors", {"x": {"dtype": "F32"}}, 0),
        "model.safetensors: tensor x's header entry is malformed",
    ),
    "offsets-against-shape": (
        lambda f: raw_safetensors(
            f / "model.safetensors", {"x": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 32]}}, 32
        ),
        "model.safetensors: tensor x (F32 [4, 4]) needs 64 bytes, its data offsets give 32",
    ),
    "header-only": (
        lambda f: raw_safetensors(f / "model.safetensors", {"__metadata__": {"format": "pt"}}, 0),
        "model.safetensors: holds no tensors, only a header; copy or fetch it again",
    ),
    "trailing-bytes": (
        lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes() + b"junk"),
        "model.safetensors: 4 bytes more than its header describes",
    ),
    "config-broken": (
        lambda f: (f / "config.json").write_text('{\n  "model_type": "qwen2",\n  "hidden_size" 8\n}\n'),
        "config.json:3: not valid JSON (Expecting ':' delimiter, column 17)",
    ),
    "config-a-list": (lambda f: (f / "config.json").write_text("[1, 2]"), "config.json: not a JSON object (a list)"),
    "config-not-utf8": (lambda f: (f / "config.json").write_bytes(b'{"a": "\xff"}'), "config.json: not UTF-8 text"),
    "tokenizer-config-broken": (
        lambda f: (f / "tokenizer_config.json").write_text("{"),
        "tokenizer_config.json:1: not valid JSON",
    ),
    "hidden-size": (
        lambda f: _config(f, hidden_size=16),
        "config.json: hidden_size is 16, the weights' is 8 (model.embed_tokens.weight is [64, 8])",
    ),
    "vocab-size": (
        lambda f: _config(f, vocab_size=151936),
        "config.json: vocab_size is 151936, the weights' is 64 (model.embed_tokens.weight is [64, 8])",
    ),
    "intermediate-size": (
        lambda f: _config(f, intermediate_size=32),
        "config.json: intermediate_size is 32, the weights' is 16 (model.layers.0.mlp.gate_proj.weight is [16, 8])",
    ),
    "layers": (lambda f: _config(f, num_hidden_layers=24), "num_hidden_layers is 24, the weights have layers 0 to 1"),
    "no-hidden-size": (lambda f: _drop(f, "hidden_size"), "config.json: no hidden_size (the weights say 8)"),
    "text-number": (lambda f: _config(f, hidden_size="8"), "config.json: hidden_size is '8', not a whole number"),
    "untied-without-head": (
        lambda f: _config(f, tie_word_embeddings=False),
        "tie_word_embeddings is false, and the weights have no lm_head.weight",
    ),
    "no-weights": (lambda f: (f / "model.safetensors").unlink(), "no weights (*.safetensors)"),
    "no-tokenizer": (lambda f: (f / "tokenizer.json").unlink(), "no tokenizer (tokenizer.json, or vocab.json"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_each_damage_is_named(good, tmp_path, damage):
    folder = copy_of(good, tmp_path / "m")
    change, expected = DAMAGE[damage]
    change(folder)
    found = verify.problems(folder)
    assert any(expected in p for p in found), found


def test_layers_with_a_gap_are_named(tmp_path):
    weights = {k: v for k, v in tensors(CONFIG).items() if not k.startswith("model.layers.0.")}
    found = verify.problems(small_model(tmp_path / "m", weights=weights))
    assert found == ["config.json: num_hidden_layers is 2, the weights have layers [1]"]


def test_the_index_must_point_at_shards_that_are_there_and_hold_its_tensors(tmp_path):
    folder = small_model(tmp_path / "m", shards=2)
    index = folder / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    (folder / "model-00002-of-00002.safetensors").unlink()
    assert verify.problems(folder) == [
        "model-00002-of-00002.safetensors: missing (listed in model.safetensors.index.json)"
    ]
    moved = {**weight_map, "model.norm.weight": "model-00001-of-00002.safetensors"}
    index.write_text(json.dumps({"weight_map": {k: v for k, v in moved.items() if v.startswith("model-00001")}}))
    assert verify.problems(folder) == [
        "model-00001-of-00002.safetensors: has no tensor model.norm.weight (its index says it does)"
    ]
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}))
    assert verify.problems(folder) == [
        "model.safetensors.index.json: shard '../elsewhere.safetensors' is not a file of this folder"
    ]
    index.write_text('{"weight_map": ')
    assert verify.problems(folder) == ["model.safetensors.index.json:1: not valid JSON (Expecting value, column 16)"]
    index.write_text('{"weight_map": ["a"]}')
    assert verify.problems(folder) == ["model.safetensors.index.json: no weight_map of tensor names to files"]


def test_the_manifest_fetch_model_wrote_is_checked_too(good, tmp_path):
    folder = copy_of(good, tmp_path / "m")
    files = {p.name: p.stat().st_size for p in folder.iterdir()}
    (folder / verify.MANIFEST).write_text(json.dumps({"repo": "r", "files": {**files, "merges.txt": 10}}))
    assert verify.problems(folder) == ["merges.txt: missing"]


def test_only_the_headers_are_read(tmp_path):
    """A 4 GB weights file (sparse: its data was never written) is checked in well under a second."""
    folder = small_model(tmp_path / "m")
    big = {"model.embed_tokens.weight": {"dtype": "F32", "shape": [2**20, 2**10], "data_offsets": [0, 2**32]}}
    text = json.dumps(big).encode()
    with open(folder / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
    os.truncate(folder / "model.safetensors", 8 + len(text) + 2**32)
    _config(folder, vocab_size=2**20, hidden_size=2**10, num_hidden_layers=0)
    started = time.perf_counter()
    assert verify.problems(folder) == []
    assert time.perf_counter() - started < 1.0


def test_the_fingerprint_follows_the_weights(good, tmp_path):
    folder = copy_of(good, tmp_path / "m")
    before = verify.fingerprint(folder)
    assert verify.fingerprint(folder) == before
    data = (folder / "model.safetensors").read_bytes()
    time.sleep(0.01)
    (folder / "model.safetensors").write_bytes(data)  # retrained in place, same shape
    assert verify.fingerprint(folder) != before
