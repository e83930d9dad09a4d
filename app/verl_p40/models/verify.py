"""Whether a folder is a model verl-p40 can use, read from what is in it and never taking anyone's word for it: the one
check behind `fetch-model` (before it certifies a folder), the doctor's model check (and so `train`'s preflight),
`eval` and `export`.

Cheap, and the tensors are never loaded: every *.json file is parsed (a broken one is named with its line), every
*.safetensors file's header is read (8 bytes of length, then a JSON header) and its tensors' data offsets are checked
against the file's size (a file cut short is named), a *.safetensors.index.json's weight map must point at shards
that are there and hold the tensors it says, and config.json's shape (hidden_size, vocab_size, intermediate_size,
num_hidden_layers) must be the weights' shape, for the Qwen2/Llama tensor names. Each problem is one short phrase
that names the file; the callers put them on their one line.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = ".verl-p40-model.json"  # what fetch-model recorded: {"repo", "revision", "files": {name: size}}
INDEX_SUFFIX = ".safetensors.index.json"
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
# (tensor, axis, config key): where a Qwen2/Llama checkpoint's shape shows in its tensors
SHAPES = (
    ("model.embed_tokens.weight", 0, "vocab_size"),
    ("model.embed_tokens.weight", 1, "hidden_size"),
    ("lm_head.weight", 0, "vocab_size"),
    ("lm_head.weight", 1, "hidden_size"),
    ("model.layers.0.mlp.gate_proj.weight", 0, "intermediate_size"),
)
LAYER = re.compile(r"^model\.layers\.(\d+)\.")
WHOLE_NUMBERS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


class Unreadable(ValueError):
    """A file of the folder that is not what its name says; the message names it."""


def read_json(path: Path, name: str | None = None):
    """`path` parsed, or Unreadable naming it (and the line, for broken JSON)."""
    name = name or path.name
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{name}: not UTF-8 text (byte {exc.start + 1})") from None
    except OSError as exc:
        raise Unreadable(f"{name}: cannot read it ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"{name}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise Unreadable(f"{name}: not valid JSON (nested too deeply)") from None


@dataclass
class Weights:
    """What the safetensors headers of a folder say: each tensor's shape and the file holding it."""

    shapes: dict[str, list[int]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    headers: dict[str, bytes] = field(default_factory=dict)  # file name -> its raw header, for the fingerprint

    def parameters(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes.values())


def read_header(path: Path) -> tuple[dict, bytes]:
    """The JSON header of a safetensors file, checked against the file's size; Unreadable names what is wrong."""
    size = path.stat().st_size
    if size == 0:
        raise Unreadable(f"{path.name}: empty")
    with open(path, "rb") as handle:
        start = handle.read(8)
        if len(start) < 8:
            raise Unreadable(f"{path.name}: {size} bytes, too short for a safetensors file")
        (length,) = struct.unpack("<Q", start)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise Unreadable(
                f"{path.name}: not a safetensors file or cut short (its header says {length} bytes, "
                f"the file has {size})"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise Unreadable(f"{path.name}: its safetensors header is not JSON (the file is damaged)") from None
    if not isinstance(header, dict):
        raise Unreadable(f"{path.name}: its safetensors header is not a JSON object (the file is damaged)")
    data = size - 8 - length
    end_of_data = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], [int(n) for n in entry["shape"]], entry["data_offsets"]
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise Unreadable(f"{path.name}: tensor {name}'s header entry is malformed (the file is damaged)") from None
        if not 0 <= begin <= end:
            raise Unreadable(f"{path.name}: tensor {name} has data offsets [{begin}, {end}] (the file is damaged)")
        if dtype in DTYPE_BYTES and end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise Unreadable(
                f"{path.name}: tensor {name} ({dtype} {shape}) needs {math.prod(shape) * DTYPE_BYTES[dtype]} bytes, "
                f"its data offsets give {end - begin} (the file is damaged)"
            )
        end_of_data = max(end_of_data, end)
    if end_of_data > data:
        needs = 8 + length + end_of_data
        raise Unreadable(f"{path.name}: cut short ({size} bytes, its header needs {needs}); copy or fetch it again")
    if end_of_data < data:
        extra = data - end_of_data
        raise Unreadable(f"{path.name}: {extra} bytes more than its header describes (the file is damaged)")
    return header, raw


def _shards(folder: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(problems, the weight files, {tensor: file} from the index files)."""
    problems: list[str] = []
    files = {p.name for p in folder.glob("*.safetensors") if p.is_file()}
    placed: dict[str, str] = {}
    for index in sorted(folder.glob(f"*{INDEX_SUFFIX}")):
        try:
            parsed = read_json(index)
        except Unreadable as exc:
            problems.append(str(exc))
            continue
        weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            problems.append(f"{index.name}: no weight_map of tensor names to files")
            continue
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard:
                problems.append(f"{index.name}: shard {shard!r} is not a file of this folder")
            elif not (folder / shard).is_file():
                problems.append(f"{shard}: missing (listed in {index.name})")
            else:
                files.add(shard)
        placed.update(weight_map)
    return problems, sorted(files), placed


def read_weights(folder: Path) -> tuple[list[str], Weights]:
    """(problems, what the headers say) of every weight file in `folder`."""
    problems, files, placed = _shards(folder)
    weights = Weights()
    for name in files:
        try:
            header, raw = read_header(folder / name)
        except Unreadable as exc:
            problems.append(str(exc))
            continue
        except OSError as exc:
            problems.append(f"{name}: cannot read it ({exc.strerror or exc})")
            continue
        weights.headers[name] = raw
        if not set(header) - {"__metadata__"}:  # a header written and nothing else: the model would load no weights
            problems.append(f"{name}: holds no tensors, only a header; copy or fetch it again")
        for tensor, entry in header.items():
            if tensor != "__metadata__":
                weights.shapes[tensor], weights.files[tensor] = [int(n) for n in entry["shape"]], name
    for tensor, shard in sorted(placed.items()):
        if shard in weights.headers and weights.files.get(tensor) != shard:
            problems.append(f"{shard}: has no tensor {tensor} (its index says it does)")
    if not files and not problems:
        problems.append("no weights (*.safetensors)")
    return problems, weights


def _whole(config: dict, key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def shape_problems(config: dict, weights: Weights) -> list[str]:
    """config.json against the weights' shapes (Qwen2/Llama tensor names; other layouts are not judged)."""
    problems = [
        f"config.json: {key} is {config[key]!r}, not a whole number"
        for key in WHOLE_NUMBERS
        if key in config and _whole(config, key) is None
    ]
    if problems:
        return problems
    for tensor, axis, key in SHAPES:
        shape = weights.shapes.get(tensor)
        if shape is None or len(shape) <= axis:
            continue
        if key not in config:
            problems.append(f"config.json: no {key} (the weights say {shape[axis]})")
        elif config[key] != shape[axis]:
            problems.append(f"config.json: {key} is {config[key]}, the weights' is {shape[axis]} ({tensor} is {shape})")
    layers = {int(m.group(1)) for m in map(LAYER.match, weights.shapes) if m}
    count = config.get("num_hidden_layers")
    if layers and count is not None and layers != set(range(count)):
        found = f"layers 0 to {max(layers)}" if layers == set(range(max(layers) + 1)) else f"layers {sorted(layers)}"
        problems.append(f"config.json: num_hidden_layers is {count}, the weights have {found}")
    if "model.embed_tokens.weight" in weights.shapes and "lm_head.weight" not in weights.shapes:
        if config.get("tie_word_embeddings") is False:
            problems.append("config.json: tie_word_embeddings is false, and the weights have no lm_head.weight")
    return problems


def manifest(folder: Path) -> dict | None:
    """What fetch-model recorded of `folder`, or None."""
    try:
        found = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def problems(folder: Path, listed: dict[str, int] | None = None) -> list[str]:
    """What stops `folder` from being a usable model folder; empty when it is. `listed`: {file: size} the folder
    must also hold (the hub's file list; by default the files fetch-model's manifest lists)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return ["no model here (config.json missing)"]
    if listed is None:
        listed = (manifest(folder) or {}).get("files") or {}
    have = lambda name: (folder / name).is_file()  # noqa: E731
    found = []
    for name, size in sorted((listed or {}).items()):
        if not have(name):
            found.append(f"{name}: missing")
        elif size is not None and (folder / name).stat().st_size != size:
            found.append(f"{name}: {(folder / name).stat().st_size} bytes, expected {size}")
    if not have("tokenizer_config.json"):
        found.append("tokenizer_config.json: missing")
    if not have("tokenizer.json") and not (have("vocab.json") and have("merges.txt")):
        found.append("no tokenizer (tokenizer.json, or vocab.json and merges.txt)")
    config = None
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith(".") or path.name.endswith(INDEX_SUFFIX) or not path.is_file():
            continue  # fetch-model's manifest is read as the listing; an index, with its shards
        try:
            parsed = read_json(path)
        except Unreadable as exc:
            found.append(str(exc))
            continue
        if path.name == "config.json":
            config = parsed if isinstance(parsed, dict) else None
            if config is None:
                found.append(f"config.json: not a JSON object (a {type(parsed).__name__})")
    weight_problems, weights = read_weights(folder)
    found += weight_problems
    if config is not None and not weight_problems:
        found += shape_problems(config, weights)
    return found


def parameters(folder: Path) -> int:
    """The number of parameters the weights of a verified folder hold (from their headers)."""
    return read_weights(Path(folder))[1].parameters()


def fingerprint(folder: Path) -> str:
    """A short digest of what the model in `folder` is: config.json, and each weight file's header, size and
    modification time (weights rewritten in place, by a new training run or an export, change it)."""
    folder = Path(folder)
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    _, weights = read_weights(folder)
    for name, raw in sorted(weights.headers.items()):
        stat = (folder / name).stat()
        digest.update(f"\0{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
        digest.update(raw)
    return digest.hexdigest()[:16]
