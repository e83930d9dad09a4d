"""How long the prepared prompts are in tokens (`verl-p40 prep --tokenizer`): the model's tokenizer, loaded before
anything is written, and the prompt lengths after its chat template, as verl's RLHFDataset counts them.
"""

from __future__ import annotations

import statistics

from verl_p40 import UserError


def load_tokenizer(tokenizer_path: str):
    """The tokenizer prep measures prompts with, its chat template tried once: both before anything is written, so a
    bad path or a missing package (transformers does not install the jinja2 its templates need) changes nothing."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UserError("--tokenizer needs the 'transformers' package") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    except Exception as exc:
        raise UserError(f"{tokenizer_path}: cannot load a tokenizer ({exc})") from None
    try:
        prompt_lengths([[{"role": "user", "content": "1 + 1?"}]], tokenizer)
    except ImportError as exc:
        raise UserError(
            f"--tokenizer {tokenizer_path}: its chat template cannot run ({exc}); fix: pip install jinja2"
        ) from None
    except Exception as exc:
        raise UserError(f"--tokenizer {tokenizer_path}: its chat template fails ({exc})") from None
    return tokenizer


def prompt_lengths(prompts: list, tokenizer) -> list[int]:
    """Each prompt's length in tokens after the model's chat template, as verl's RLHFDataset counts it (its
    `filter_overlong_prompts` drops those over data.max_prompt_length)."""
    return [len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)) for prompt in prompts]


def prompt_token_stats(rows: list[dict], tokenizer) -> dict[str, float]:
    """Prompt length in tokens after the model's chat template, as verl's RLHFDataset counts it."""
    lengths = sorted(prompt_lengths([row["prompt"] for row in rows], tokenizer))
    if not lengths:
        return {}

    cuts = statistics.quantiles(lengths, n=100, method="inclusive") if len(lengths) > 1 else [lengths[0]] * 99
    return {
        "mean": round(statistics.fmean(lengths), 1),
        "p50": round(cuts[49], 1),
        "p99": round(cuts[98], 1),
        "max": lengths[-1],
    }
