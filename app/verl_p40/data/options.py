"""`verl-p40 prep`'s options, declared once (`verl_p40.options`): the command line builds them and `data.prep.main`
takes them whole, so a new flag touches this dataclass and the code that uses it."""

from __future__ import annotations

from dataclasses import dataclass

from verl_p40 import defaults
from verl_p40.data.gsm8k import DEFAULT_INSTRUCTION
from verl_p40.options import FILE, FOLDER, option


@dataclass(frozen=True)
class PrepOptions:
    source: str = option(
        defaults.GSM8K_SOURCE.value,
        "folder with train/test.jsonl or parquet, or hf:openai/gsm8k",
        env=defaults.GSM8K_SOURCE.env,
        path=FOLDER,
        exists=True,
        unless=("hf:",),
    )
    out: str = option(defaults.DATA.value, "output folder", env=defaults.DATA.env, path=FOLDER)
    limit: int | None = option(None, "at most N rows per split", kind=int, low=1)
    skip_invalid: bool = option(False, "skip bad rows (and count them) instead of stopping", switch=True)
    val_size: int | None = option(
        None,
        "also write val.parquet: N train rows held out for validation, so choosing settings never sees the test split;"
        " 0: none",
        shown=f"{defaults.VAL_SIZE.value} where the train split has {defaults.VAL_FROM_TRAIN}x that many rows, else 0",
        env=defaults.VAL_SIZE.env,
        kind=int,
        low=0,
    )
    instruction: str = option(DEFAULT_INSTRUCTION, "text appended to each question", shown="the GSM8K instruction")
    tokenizer: str | None = option(None, "model/tokenizer folder: also print prompt-token statistics", path=FOLDER)
    cache_dir: str | None = option(None, "datasets cache for hf: sources", env=defaults.DATASETS_CACHE.env, path=FOLDER)
    summary_json: str | None = option(None, "also write the summary as JSON here", path=FILE)
    skip_existing: bool = option(
        False, "do nothing when the folder holds what this prep would write (its manifest says so)", switch=True
    )
