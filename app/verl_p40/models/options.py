"""`verl-p40 export`'s options, declared once (`verl_p40.options`): the command line builds them and `models.export`
takes them whole, so a new flag touches this dataclass and the code that uses it. The checkpoints option and the
model names `latest` and `best` are shared with `verl-p40 eval` (`verl_p40.evaluation.options`)."""

from __future__ import annotations

from dataclasses import dataclass

from verl_p40 import UserError, defaults
from verl_p40.options import FOLDER, option

LATEST, BEST = "latest", "best"  # a model given as the newest checkpoint, or the best validated one
GGUF_KINDS = ("f16", "q8_0")


def checkpoints_option():
    return option(defaults.CHECKPOINTS.value, "for 'latest' and 'best'", env=defaults.CHECKPOINTS.env, path=FOLDER)


def gguf_kinds(value: str, origin: str = "--gguf") -> list[str]:
    """`--gguf f16,q8_0` as the kinds it names, each once (`f16,f16` writes one file), typed once where the options
    are resolved (the option's `convert`); an unknown kind is refused naming `origin`."""
    kinds = list(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in GGUF_KINDS]
    if unknown:
        raise UserError(f"{origin} {','.join(unknown)}: not one of {', '.join(GGUF_KINDS)}")
    return kinds


@dataclass(frozen=True)
class ExportOptions:
    model: str = option(
        BEST,
        "verl checkpoint .../global_step_N (or its actor folder), best (of validation; the newest when none), "
        "latest, or a Hugging Face folder",
        path=FOLDER,
        unless=(LATEST, BEST),
    )
    checkpoints: str = checkpoints_option()
    out: str = option(defaults.EXPORTS.value, "output folder", env=defaults.EXPORTS.env, path=FOLDER)
    dtype: str = option("fp16", "of the Hugging Face folder", choices=("fp16", "fp32"))
    lora: str = option(
        "merged",
        "a LoRA run: the adapter folded into the weights, or the adapter alone",
        choices=("merged", "adapter"),
    )
    gguf: list[str] = option(
        [], "also write GGUF files for llama.cpp/Ollama", metavar="f16,q8_0", shown="", convert=gguf_kinds
    )
