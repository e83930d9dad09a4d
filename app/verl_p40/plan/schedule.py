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
from verl_p40.plan.inputs import Prompts


@dataclass(frozen=True)
class Rows:
    """The train rows verl keeps: `count` (None: not readable here), and whether the overlong-prompt filter is
    counted in it (`exact`); `why` says what could not be read."""

    count: int | None
    exact: bool = True
    why: str = ""


def train_rows(
    train_file: Path,
    rows: int | None,
    prompts: Prompts,
    filter_overlong: bool,
    max_prompt_length: int,
    here: bool = True,
) -> Rows:
    """The rows of `train_file` (`rows` of them, None: not readable here) verl's dataset keeps: every row, less the
    prompts over `max_prompt_length` tokens when the filter is on. Prep's manifest tells when no prompt is that long
    (`prompts.longest`: `prep --tokenizer`); else the prompts counted with the model's tokenizer (`prompts.lengths`);
    without either the count is of the rows before the filter, and says so. `plan/inputs.py` read them."""
    if rows is None:  # missing or unreadable, or a plan made for another machine (`here` False), which reads no file
        why = "is not readable here" if here else "is not read: a plan for --card takes no files of this machine"
        return Rows(None, False, f"{train_file} {why}")
    if not filter_overlong:
        return Rows(rows)
    if prompts.longest is not None and prompts.longest <= max_prompt_length:
        return Rows(rows)
    if prompts.lengths is not None:
        return Rows(sum(1 for n in prompts.lengths if n <= max_prompt_length))
    longest = prompts.longest
    why = "no tokenizer here to count them" if longest is None else f"prep's manifest says up to {longest}"
    return Rows(rows, False, f"before verl drops prompts over {max_prompt_length} tokens: {why}")


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
