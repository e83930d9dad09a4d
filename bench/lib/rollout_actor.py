"""The rollout checks' one-process actor (experiments/decode_check.py, experiments/rollout_log_probs.py): GSM8K prompts
as verl's dataset hands them to the rollout, and the model as the trainer holds it (FSDP1 on a GPU, with the product's
memory cap where VERL_P40_GPU_MEMORY_CAP_GB is set; a plain model on a CPU, where FSDP1 refuses). The cap asked for
and the fraction applied are in every check's JSON (`describe`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable


def prompts(tokenizer, data: str, questions: int, width: int):
    """The first `questions` prompts of a prepared split, as verl's dataset hands them to the rollout: the chat
    template with the generation prompt, left-padded to data.max_prompt_length, positions from the mask."""
    import pyarrow.parquet as pq  # not pandas.read_parquet: it aborted at exit in 7-9 of 30 runs (issue 66)

    rows = pq.read_table(data, columns=["prompt"]).slice(0, questions).column("prompt").to_pylist()
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in rows]
    batch = tokenizer(texts, return_tensors="pt", padding="max_length", max_length=width, padding_side="left")
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    return batch.input_ids, batch.attention_mask, positions


@dataclass
class Actor:
    tokenizer: Any
    model: Any  # the Hugging Face model
    module: Any  # what the rollout and the actor call: FSDP1-wrapped on a GPU, the model itself on a CPU
    device: Any
    sync: Callable[[], None]
    capped: float | None  # the memory cap's fraction of the GPU (memcap.apply), None without one
    path: str = ""
    cap_gb: float | None = None  # the cap asked for (cap_gb()), None without one

    def describe(self, questions: int, new_tokens: int) -> dict:
        """The head of a check's JSON: the model, the prompts, the device (under the mask: Tesla P40), torch."""
        import torch

        cuda = self.device.type == "cuda"
        return {
            "model": self.path,
            "questions": questions,
            "new_tokens": new_tokens,
            "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "memory_cap_gb": self.cap_gb,
            "memory_cap_fraction": self.capped,
            "torch": torch.__version__,
        }


def cap_gb(environ=os.environ) -> float | None:
    """The memory cap a check asks for: the product's `VERL_P40_GPU_MEMORY_CAP_GB` (what the bench scripts set), else
    the workers' own variable. memcap.apply() reads only the workers' (`VERL_P40_WORKER_MEMORY_CAP_GB`, which train's
    plan writes), so the scripts' cap was never applied: the 2026-12-05 agreement ran uncapped (issue 67)."""
    from verl_p40.defaults import GPU_MEMORY_CAP_ENV, WORKER_MEMORY_CAP_ENV

    value = environ.get(GPU_MEMORY_CAP_ENV) or environ.get(WORKER_MEMORY_CAP_ENV)
    return float(value) if value else None


def _apply_cap(cpu: bool) -> tuple[float | None, float | None]:
    """(the cap asked for in GB, the fraction of the GPU memcap set); a cap asked for on a GPU that memcap did not
    apply stops the check rather than run it uncapped."""
    from verl_p40 import memcap

    asked = cap_gb()
    if asked is None:
        return None, None
    os.environ[memcap.ENV] = f"{asked:g}"
    fraction = memcap.apply()
    if fraction is None and not cpu:
        raise RuntimeError(f"a memory cap of {asked:g} GB was asked for and not applied")
    return asked, fraction


def load(path: str, cpu: bool, port: str) -> Actor:
    """A process group of one (gloo on a CPU, NCCL on a GPU) and the fp32 model at `path` with SDPA attention."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", port))
    device = torch.device("cpu" if cpu else "cuda", 0)
    dist.init_process_group(backend="gloo" if cpu else "nccl", rank=0, world_size=1)
    if cpu and not hasattr(torch.cpu, "empty_cache"):  # verl empties the device's cache after generating
        torch.cpu.empty_cache = lambda: None
    if not cpu:
        torch.cuda.set_device(0)
    asked, capped = _apply_cap(cpu)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="sdpa")
    policy = lambda module, recurse, nonwrapped_numel: transformer_auto_wrap_policy(  # noqa: E731
        module, recurse, nonwrapped_numel, transformer_layer_cls={Qwen2DecoderLayer}
    )
    module = model if cpu else FSDP(model.to(device), auto_wrap_policy=policy, device_id=0, use_orig_params=False)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    return Actor(tokenizer, model, module, device, sync, capped, path, asked)


def save(result: dict, out: str, name: str) -> None:
    """The check's JSON as `out`/`name`, and the process group ended."""
    import json
    from pathlib import Path

    import torch.distributed as dist

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    dist.destroy_process_group()
