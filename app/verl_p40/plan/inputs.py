"""What a plan reads from the disk and the environment, as one value beside `Facts`: the model's config.json, the
data folder (whether prep held a validation slice out, each parquet file's rows, prep's manifest, the train prompts'
lengths by the model's tokenizer) and the allocator's setting for the trainer.

`Inputs.read(options)` reads them once, at the door: `planner.plan` when it is handed none, the doctor's Context once
per command (`Context.inputs()`); the plan's steps take what they need from it and read nothing themselves
(tests/unit_plan/test_inputs.py). A plan for a card you do not have (`verl-p40 config --card NAME`) takes
`Inputs.absent()`: nothing of the folders of the machine printing it, as `Facts.of_card` takes nothing of its hardware.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.verlconfig import set_values

ALLOCATOR_ENV = "PYTORCH_CUDA_ALLOC_CONF"
HELD_OUT = "val.parquet"  # prep's validation slice (its default, or --val-size)


@dataclass(frozen=True)
class Prompts:
    """The train file's prompts: the longest in tokens as prep's manifest records it (None: not recorded) and each
    one's length by the model's tokenizer (None: not counted, as with no tokenizer here or a recorded longest)."""

    longest: int | None = None
    lengths: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Inputs:
    """The disk and the environment a plan depends on, read once (`read`), or nothing of them (`absent`)."""

    model: Mapping[str, Any] | None = None  # the model folder's config.json (None: not readable here)
    held_out: bool = False  # the data folder has val.parquet: verl validates on it
    rows: Mapping[str, int] = field(default_factory=dict)  # rows of each parquet file the plan names, by path
    prompts: Prompts = Prompts()  # the train file's
    allocator: str | None = None  # $PYTORCH_CUDA_ALLOC_CONF (None: unset)
    here: bool = True  # read on this machine (False: a plan for --card, which reads nothing here)

    @classmethod
    def absent(cls) -> Inputs:
        """A plan for a card you do not have: no model, no data, no setting of this machine's."""
        return cls(here=False)

    @classmethod
    def read(cls, options: RunOptions) -> Inputs:
        """The folders `options` name (and the files the run's own data.train_files / data.val_files name), and the
        allocator's variable, read once."""
        sets = set_values(options.sets)
        data = data_folder(options)
        train = str(sets.get("data.train_files", data / "train.parquet"))
        held_out = (data / HELD_OUT).is_file()
        val = str(sets.get("data.val_files", data / validation_file(held_out)))
        rows = {str(Path(f)): n for f in (train, val) if (n := parquet_rows(Path(f))) is not None}
        tokenizer = str(sets.get("actor_rollout_ref.model.tokenizer_path") or Path(options.model).expanduser())
        # the prompt lengths count only where verl filters overlong prompts (the schedule's rows): not with the run's
        # own data.filter_overlong_prompts=false, which spares loading the tokenizer over every train prompt
        filtered = sets.get("data.filter_overlong_prompts", True) is not False
        return cls(
            model=model_config(Path(options.model).expanduser()),
            held_out=held_out,
            rows=rows,
            prompts=train_prompts(Path(train), tokenizer) if str(Path(train)) in rows and filtered else Prompts(),
            allocator=os.environ.get(ALLOCATOR_ENV),
        )


def validation_file(held_out: bool) -> str:
    """The file of the data folder verl validates on: val.parquet (prep's default, or `--val-size`) when the folder
    has one (`held_out`), else test.parquet."""
    return HELD_OUT if held_out else "test.parquet"


def data_folder(options: RunOptions) -> Path:
    return Path(options.data).expanduser()


def model_config(folder: Path) -> dict[str, Any] | None:
    """The model folder's config.json (None: not here, or not a JSON object: the model check names it)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def parquet_rows(path: Path) -> int | None:
    """The rows of a parquet file from its footer (None: not readable here)."""
    try:
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:
        return None


def train_prompts(train_file: Path, tokenizer: str) -> Prompts:
    """The longest prompt prep's manifest beside `train_file` records; without one, each prompt's length counted
    with the tokenizer in the folder `tokenizer` when it is here (never the hub)."""
    longest = _longest_prompt(train_file)
    if longest is not None or not (Path(tokenizer) / "tokenizer_config.json").is_file():
        return Prompts(longest)
    from verl_p40.data import token_stats

    try:
        import pyarrow.parquet as pq

        prompts = pq.read_table(train_file, columns=["prompt"]).column("prompt").to_pylist()
        lengths = token_stats.prompt_lengths(prompts, token_stats.load_tokenizer(tokenizer))
    except Exception:  # a tokenizer or file the trainer will name itself when it reads it
        return Prompts()
    return Prompts(None, tuple(lengths))


def _longest_prompt(train_file: Path) -> int | None:
    """The longest train prompt in tokens, as prep's manifest beside `train_file` records it (None: not recorded)."""
    from verl_p40.data.manifest import read_manifest

    manifest, _ = read_manifest(train_file.parent)  # a damaged one: not recorded
    try:
        return int(manifest["outputs"][train_file.stem]["prompt_tokens"]["max"])
    except (ValueError, KeyError, TypeError):
        return None
