"""How many steps a run takes and how many passes over the data verl needs for them.

verl 0.5.0's trainer (verl/trainer/ppo/ray_trainer.py) loads the train split with `drop_last=True`, so one epoch is
rows // data.train_batch_size batches, where rows are those its RLHFDataset keeps after
`data.filter_overlong_prompts` (prompts longer than data.max_prompt_length tokens after the chat template are
dropped). Its loop is `for epoch in range(total_epochs): for batch in loader`, and a step is the last (validated and
saved) only when `global_steps >= total_training_steps`: steps beyond `total_epochs` epochs never come, and the run
ends early without its last validation and save. So the plan gives verl the epochs the announced steps need
(it reshuffles the data each epoch with its seed); more epochs than needed cost nothing, the loop stops at the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from verl_p40 import UserError


@dataclass(frozen=True)
class Rows:
    """The train rows verl keeps: `count` (None: not readable here), and whether the overlong-prompt filter is
    counted in it (`exact`); `why` says what could not be read."""

    count: int | None
    exact: bool = True
    why: str = ""


def train_rows(train_file: Path, filter_overlong: bool, max_prompt_length: int, tokenizer: str | None = None) -> Rows:
    """The rows of `train_file` verl's dataset keeps: every row, less the prompts over `max_prompt_length` tokens when
    the filter is on. Prep's manifest (`prep --tokenizer`) tells when no prompt is that long; else the prompts are
    counted with the model's tokenizer (the folder `tokenizer`) when it is here; without either the count is of the
    rows before the filter, and says so."""
    rows = parquet_rows(train_file)
    if rows is None:  # a plan made for another machine: the file is not here
        return Rows(None, False, f"{train_file} is not readable here")
    if not filter_overlong:
        return Rows(rows)
    longest = _longest_prompt(train_file)
    if longest is not None and longest <= max_prompt_length:
        return Rows(rows)
    kept = _count_kept(train_file, max_prompt_length, tokenizer)
    if kept is not None:
        return Rows(kept)
    return Rows(
        rows, False, f"before verl drops prompts over {max_prompt_length} tokens: no tokenizer here to count them"
    )


def _count_kept(train_file: Path, max_prompt_length: int, tokenizer: str | None) -> int | None:
    """The prompts of `train_file` of at most `max_prompt_length` tokens, counted with the tokenizer in the folder
    `tokenizer` (None: no tokenizer there, or the file's prompts are not readable)."""
    if not tokenizer or not (Path(tokenizer) / "tokenizer_config.json").is_file():
        return None  # never the hub: only a local folder
    from verl_p40.data import token_stats

    try:
        import pyarrow.parquet as pq

        prompts = pq.read_table(train_file, columns=["prompt"]).column("prompt").to_pylist()
        lengths = token_stats.prompt_lengths(prompts, token_stats.load_tokenizer(tokenizer))
    except Exception:  # a tokenizer or file the trainer will name itself when it reads it
        return None
    return sum(1 for n in lengths if n <= max_prompt_length)


def _longest_prompt(train_file: Path) -> int | None:
    """The longest train prompt in tokens, as prep's manifest beside `train_file` records it (None: not recorded)."""
    from verl_p40 import state_files
    from verl_p40.data.manifest import MANIFEST

    manifest, _ = state_files.read_json(Path(train_file).parent / MANIFEST)  # a damaged one: not recorded
    try:
        return int(manifest["outputs"][Path(train_file).stem]["prompt_tokens"]["max"])
    except (ValueError, KeyError, TypeError):
        return None


def parquet_rows(path: Path) -> int | None:
    """The rows of a parquet file from its footer (None: not readable here, e.g. a plan made for another machine)."""
    try:
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:
        return None


@dataclass(frozen=True)
class Schedule:
    steps: int | None  # None: verl's own count, which needs the rows (not readable here)
    prompts: int  # a step
    rows: Rows
    batches: int | None  # a pass over the rows (verl drops the last partial batch)
    epochs: int  # passes verl is given

    @property
    def fraction(self) -> float | None:
        """The data the steps see, in passes over the rows."""
        return self.steps * self.prompts / self.rows.count if self.rows.count and self.batches else None

    def line(self) -> str:
        if self.steps is None:
            passes = f"{self.epochs:,} pass" + ("es" if self.epochs != 1 else "")
            return (
                f"steps: verl's own count, {passes} over the train rows at {self.prompts:,} prompts a step (could not "
                f"count the rows: {self.rows.why})"
            )
        head = f"{self.steps:,} steps of {self.prompts:,} prompts"
        if self.rows.count is None:
            return (
                f"{head}: could not count the epochs ({self.rows.why}); verl is given {self.epochs:,}, enough for any "
                f"data, and the run ends at step {self.steps:,}"
            )
        if self.batches == 0:
            return (
                f"{head}: more prompts a step than the {self.rows.count:,} train rows verl keeps; it drops a partial "
                f"batch and would run no step: set data.train_batch_size to at most {self.rows.count:,}"
            )
        passes = f", {self.epochs} passes reshuffled" if self.epochs > 1 else ""
        rows = f"{self.rows.count:,} rows" + ("" if self.rows.exact else f" ({self.rows.why})")
        return f"{head} = {self.fraction:.2f} epochs of {rows}: {self.batches:,} batches a pass{passes}"

    def record(self) -> dict:
        return {
            "prompts_per_step": self.prompts,
            "steps": self.steps,
            "epochs": round(self.fraction, 4) if self.fraction is not None else None,
            "passes": self.epochs,
            "rows": self.rows.count,
            "rows_filter_counted": self.rows.exact,
        }


def plan(
    rows: Rows,
    prompts: int,
    steps: int | None,
    epochs: int,
    epochs_origin: str | None,
    steps_origin: str = "trainer.total_training_steps",
) -> Schedule:
    """The run's steps and the passes verl needs for them. `steps` None: verl's own count (batches x epochs).
    `epochs_origin`: where a trainer.total_epochs the plan must not change was set (None: the plan's to choose)."""
    if rows.count is None:
        if steps is None:
            return Schedule(None, prompts, rows, None, epochs)
        return Schedule(steps, prompts, rows, None, epochs if epochs_origin else max(epochs, steps))
    batches = rows.count // prompts
    if batches < 1:  # verl stops on 'Train dataloader is empty!'; the preflight's own checks of the folders come first
        return Schedule(steps or 0, prompts, rows, 0, epochs)
    if steps is None:
        return Schedule(batches * epochs, prompts, rows, batches, epochs)
    needed = max(1, math.ceil(steps / batches))
    if epochs_origin and epochs < needed:
        raise UserError(
            f"{epochs_origin}: trainer.total_epochs={epochs} gives {epochs * batches:,} steps of {prompts:,} prompts "
            f"({rows.count:,} rows, {batches:,} batches a pass) and the run announces {steps:,} "
            f"({steps_origin}); verl would stop at step {epochs * batches:,} without its last validation and save: "
            f"set trainer.total_epochs={needed}, or leave it out and the plan sets it"
        )
    return Schedule(steps, prompts, rows, batches, epochs if epochs_origin else needed)
