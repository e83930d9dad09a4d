"""`verl-p40 export`: a trained model to take home. From a verl checkpoint (`latest`, `.../global_step_N/actor`) or any
Hugging Face folder:
- a Hugging Face folder in fp16 (default) or fp32 with the tokenizer and its chat template (transformers, vLLM);
- for a LoRA run, the adapter on its own (`--lora adapter`, with the run's alpha) or folded into the weights;
- GGUF files for llama.cpp and Ollama (`--gguf f16,q8_0`), written with the `gguf` package's writer and its Qwen2
  tensor-name map. Metadata as llama.cpp's converter writes it for Qwen2 (read there, written here): the model's
  shape, rope base and norm epsilon, the GPT-2 BPE vocabulary with its merges (pre-tokenizer `qwen2`), the
  tokenizer's eos, padding and BOS settings and its chat template, so that llama.cpp's chat and Ollama need no
  template of their own (tests/unit_models/test_gguf_llamacpp.py loads the files in llama.cpp). A model whose file
  llama.cpp would read otherwise (rope scaling, sliding windows, another head size or tokenizer) is refused.
Every output appears whole or not at all, and all of them together: they are written under temporary names in the
output folder and renamed when the last is complete. Exporting again into the same folder is the normal case: what
export wrote there before is replaced (`verl_p40.outputs` knows its own files); anything else there is left alone,
and a user's file or folder of an output's name stops the export before any work.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from verl_p40 import UserError
from verl_p40.models.options import ExportOptions
from verl_p40.outputs import OutputFolder


def hf_folder(source: Path, target: Path, dtype: str) -> Path:
    """`source` (a complete HF folder, fp32) saved in `dtype` with its tokenizer into the folder `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, torch_dtype=torch.float32)
    if dtype == "fp16":
        model = model.half()
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(source).save_pretrained(target)
    return target


def adapter_folder(source: Path, target: Path) -> Path:
    """The LoRA adapter `verl_p40.models.checkpoints` kept beside the merged model (with the run's alpha), copied into
    the folder `target`."""
    from verl_p40.models.checkpoints import ADAPTER

    shutil.copytree(source / ADAPTER, target, dirs_exist_ok=True)
    return target


def _tokenizer(source: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source)


def _vocabulary(tokenizer, size: int):
    """(tokens, token types) padded to the embedding's size, as llama.cpp's GPT-2 BPE vocabularies are."""
    import gguf

    ids = {i: token for token, i in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(size):
        if i in added:
            tokens.append(added[i].content)
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        elif i in ids:
            tokens.append(ids[i])
            types.append(gguf.TokenType.NORMAL)
        else:  # the embedding has rows no token uses (Qwen2.5: 151,936 rows, 151,665 tokens)
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    return tokens, types


def _tokenizer_keys(writer, source: Path, tokenizer, config: dict, size: int) -> None:
    """What llama.cpp's tokenizer and chat template read, from the tokenizer transformers loads (not guessed from
    files: without a tokenizer.json, the `gguf` package's SpecialVocab finds no eos or padding token). Qwen2's
    tokenizer adds no BOS; without `add_bos_token = false` llama.cpp would put token `bos` before every prompt."""
    import gguf

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")  # llama.cpp's Qwen2 pre-tokenizer: Qwen2's split of digits, CJK and spaces
    tokens, types = _vocabulary(tokenizer, size)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    merges = gguf.SpecialVocab(source, load_merges=True, special_token_types=()).merges
    if not merges:
        raise UserError(f"{source}: no BPE merges (merges.txt or tokenizer.json), which a GGUF file needs")
    writer.add_token_merges(merges)
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else config.get("bos_token_id")
    if isinstance(bos, int):
        writer.add_bos_token_id(bos)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    if tokenizer.pad_token_id is not None:
        writer.add_pad_token_id(tokenizer.pad_token_id)
    ids = tokenizer("1").input_ids
    writer.add_add_bos_token(tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id])
    writer.add_add_eos_token(tokenizer.eos_token_id is not None and ids[-1:] == [tokenizer.eos_token_id])
    writer.add_chat_template(tokenizer.chat_template)


def _weights(source: Path) -> dict:
    from safetensors.torch import load_file

    state = {}
    for path in sorted(source.glob("*.safetensors")):
        state.update(load_file(path))
    if not state:
        raise UserError(f"{source}: no *.safetensors weights to export")
    return state


GGUF_KEYS = ("num_hidden_layers", "max_position_embeddings", "hidden_size", "intermediate_size")
GGUF_KEYS += ("num_attention_heads", "rms_norm_eps", "vocab_size")  # what a GGUF file records, read from config.json


def gguf_config(source: Path) -> dict:
    """The config.json of `source` when a GGUF file llama.cpp reads as transformers does can be made of it; else the
    one line saying why, before anything is written. The writer records Qwen2's shape, its BPE tokenizer (llama.cpp's
    `qwen2` pre-tokenizer), the tokenizer's special tokens and its chat template; nothing else."""
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "qwen2":
        raise UserError(
            f"{source}: GGUF export knows Qwen2 models, this is {config.get('model_type')!r}; export without --gguf"
        )
    missing = [key for key in GGUF_KEYS if key not in config]
    if missing:
        raise UserError(f"{source / 'config.json'}: no {missing[0]}, which a GGUF file records; export without --gguf")
    for key, why in UNWRITTEN.items():
        if config.get(key):
            raise UserError(f"{source / 'config.json'}: {key} is set, {why}; export without --gguf")
    heads = int(config["num_attention_heads"])
    if config.get("head_dim") not in (None, int(config["hidden_size"]) // heads):
        raise UserError(
            f"{source / 'config.json'}: head_dim is not hidden_size / num_attention_heads, as llama.cpp's "
            "Qwen2 reads it; export without --gguf"
        )
    tokenizer = _tokenizer(source)
    if not type(tokenizer).__name__.startswith("Qwen2Tokenizer"):
        raise UserError(
            f"{source}: the tokenizer is {type(tokenizer).__name__}, not Qwen2's, and llama.cpp would "
            "split text as Qwen2's does; export without --gguf"
        )
    if len(tokenizer) > int(config["vocab_size"]) or tokenizer.eos_token_id is None or not tokenizer.chat_template:
        raise UserError(
            f"{source}: the tokenizer needs an eos token, a chat template and at most vocab_size tokens "
            "for llama.cpp and Ollama to chat with the file; export without --gguf"
        )
    return config


UNWRITTEN = {  # settings llama.cpp would need keys for that this writer does not write: it would ignore them
    "rope_scaling": "and llama.cpp would need rope-scaling keys this export does not write",
    "use_sliding_window": "and llama.cpp's Qwen2 attends to the whole context",
}


def gguf_file(source: Path, target: Path, kind: str) -> Path:
    """A GGUF file of the Qwen2 model in `source`, written to `target`: `f16` (norms and biases in f32, as llama.cpp)
    or `q8_0` (2-D weights whose rows are whole 32-value blocks; the rest as for f16)."""
    return _gguf_file(source, gguf_config(source), target, kind)


def _gguf_file(source: Path, config: dict, target: Path, kind: str) -> Path:
    import gguf
    import numpy as np

    layers = int(config["num_hidden_layers"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, layers)
    file_type = gguf.LlamaFileType.MOSTLY_F16 if kind == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0
    tied = bool(config.get("tie_word_embeddings", False))
    writer = gguf.GGUFWriter(str(target), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN2])
    writer.add_name(source.name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(layers)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config.get("num_key_value_heads", config["num_attention_heads"])))
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_file_type(file_type)
    _tokenizer_keys(writer, source, _tokenizer(source), config, int(config["vocab_size"]))
    for name, tensor in _weights(source).items():
        if name == "lm_head.weight" and tied:
            continue  # llama.cpp reads the output projection from token_embd when there is none
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise UserError(f"{source}: tensor {name} has no GGUF name for Qwen2")
        data = tensor.float().numpy()
        if data.ndim == 1:
            writer.add_tensor(new, data.astype(np.float32))
        elif kind == "q8_0" and data.shape[-1] % 32 == 0:
            quantized = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(new, quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(new, data.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def run(options: ExportOptions) -> list[Path]:
    """Export `options.model` (a checkpoint, `latest`, `best` or an HF folder) into `options.out`; the paths
    written."""
    out = Path(options.out)
    folder = OutputFolder(out, "--out", "export")
    folder.check()  # a file where the folder belongs, or a read-only disk: said before a checkpoint is merged
    with folder.writer():  # the folder's one writer from here to the last rename: a second export is refused
        checkpoints = Path(options.checkpoints)
        return _export(folder, options.model, checkpoints, out, options.dtype, options.gguf, options.lora)


def _export(
    folder: OutputFolder, model: str, checkpoints: Path, out: Path, dtype: str, gguf_kinds: list[str], lora: str
) -> list[Path]:
    from verl_p40.models.checkpoints import ADAPTER, MERGED, resolve_model

    source = resolve_model(model, checkpoints)  # a checkpoint is merged (fp32, LoRA folded in) once, and cached
    name = source.parent.parent.name if source.name == MERGED else source.name  # global_step_N or the folder
    if lora == "adapter" and not (source / ADAPTER).is_dir():
        raise UserError(f"{source}: no LoRA adapter here (the run trained every weight); export without --lora adapter")
    first = f"{name}-lora-adapter" if lora == "adapter" else f"{name}-hf-{dtype}"
    names = [first] + [f"{name}-{kind}.gguf" for kind in gguf_kinds]
    folder.check(names)  # a user's file of an output's name: said before the model is loaded
    if lora != "adapter" or gguf_kinds:  # and a package that is not installed, before anything is written
        import safetensors.torch  # noqa: F401
        import transformers  # noqa: F401
    if gguf_kinds:
        import gguf  # noqa: F401

        gguf_config(source)  # a model GGUF cannot hold: said before the Hugging Face folder is written
    with folder.write(names, directory=[True] + [False] * len(gguf_kinds)) as temps:
        if lora == "adapter":
            adapter_folder(source, temps[0])
        else:
            hf_folder(source, temps[0], dtype)
        for kind, temp in zip(gguf_kinds, temps[1:]):
            gguf_file(source, temp, kind)
    return [out / n for n in names]
