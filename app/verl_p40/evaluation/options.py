"""`verl-p40 eval`'s options, declared once (`verl_p40.options`): the command line builds them and
`evaluation.evaluate.run` takes them whole, so a new flag touches this dataclass and the code that uses it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_p40 import defaults
from verl_p40.models.options import BEST, LATEST, checkpoints_option
from verl_p40.options import FOLDER, option


def _device(value: str, origin: str) -> None:
    """--device: one of this machine's, said before any model is read (torch is imported only here)."""
    from verl_p40.evaluation.generation import check_device

    check_device(value, origin)


@dataclass(frozen=True)
class EvalOptions:
    model: str | None = option(
        defaults.MODEL.value,
        "Hugging Face folder, verl checkpoint .../global_step_N (or its actor folder), latest or best (default: the "
        "fetched model)",
        env=defaults.MODEL.env,
        path=FOLDER,
        unless=(LATEST, BEST),
    )
    compare: str | None = option(
        None, "a second model, same forms (the trained one)", path=FOLDER, unless=(LATEST, BEST)
    )
    data: str = option(
        os.path.join(defaults.DATA.value, "test.parquet"),
        "a parquet file of verl's RL schema, or the folder verl-p40 prep wrote (its test.parquet)",
        env=defaults.DATA.env,
        below="test.parquet",
    )
    out: str = option(
        os.path.join(defaults.LOGS.value, "eval"), "output folder", env=defaults.LOGS.env, below="eval", path=FOLDER
    )
    limit: int | None = option(None, "only the first N questions", kind=int, low=1)
    batch_size: int = option(32, "questions generated together", kind=int, low=1)
    max_new_tokens: int = option(512, "longest answer, in tokens", kind=int, low=1)
    checkpoints: str = checkpoints_option()
    logs: str = option(defaults.LOGS.value, "trainer logs for curves.png", env=defaults.LOGS.env, path=FOLDER)
    device: str | None = option(None, "cuda, cuda:1 or cpu", shown="cuda when available", check=_device)
    examples: int = option(10, "questions shown side by side in report.md", kind=int, low=0)
    engine: str = option(
        "auto",
        "generation engine: auto = vLLM where installed on sm_70+, else HF generate",
        choices=("auto", "hf", "vllm"),
    )
    dtype: str = option(
        "fp32",
        "of the weights while generating; bf16 greedy answers do not repeat run to run, so compare models in fp32",
        choices=("fp32", "bf16", "fp16"),
    )
    decode: str = option(
        "auto",
        "the hf engine's decoding: auto = the rollout's decoder (a CUDA graph a token on a GPU), off = transformers' "
        "generate()",
        choices=("auto", "off"),
    )
