"""The learning bench's recipe and its two modes (bench/learning_run.py): the GSM8K recipe trained, the p40 mode (the
Pascal mask, the p40 profile, a 24 GB cap) and the fast mode (unmasked, the product's plan as a user runs it), the
`prepare` phase (the real-weights proxy and `verl-p40 prep`) and the mode's `verl-p40 train` command."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from lib.real_runs import State, cli, real_model, run
from lib.run_projection import BEFORE_ADOPTION

RECIPE = "grpo-gsm8k"
VAL_SIZE = 256
MAX_NEW_TOKENS = 512  # verl-p40 eval's default, and the recipe's data.max_response_length


# Issue 69's yardstick prices every variant with the plan its first runs had (verl's old_log_prob pass, verl's
# micro-batches, the decoder without compaction): the speed-ups issue 67 adopted since on the P40 path are pinned off
# in both modes, so that a run's held-out points per projected P40-hour compare with the earlier runs'; a run's own
# --override (after these) turns them on, and is reported apart.
YARDSTICK_SETS = [f"{key}={value}" for key, value in BEFORE_ADOPTION.items()]
MODES = {
    "p40": {
        "profile": "p40",
        "mask": "6.1",
        "cli": ["--gpu-memory-cap-gb", "24"],
        "sets": YARDSTICK_SETS,
        "setup": "Pascal mask PASCAL_MASK_CC=6.1 (Tesla P40), 24 GB cap per process, audit off",
    },
    # the product's own plan on the unmasked GPU, as a user runs it: the auto profile (ampere on an H200, TF32 by
    # --tf32 auto) and the memory plan's sizes for the card's memory (on an H200: nothing offloaded, generation in
    # one chunk, large micro-batches). The hand-set sizes this mode had before the memory plan ran 41.5 s a step
    # against the plan's 39.9 (bench/results/speed-2026-12-02: h200-hand, h200-plain); they are gone.
    "fast": {
        "profile": "auto",
        "mask": None,
        "cli": [],
        "sets": YARDSTICK_SETS,
        "setup": "unmasked, the product's plan as a user runs it (--profile auto, the memory plan; no hand-set sizes)",
    },
}


def prepare(args: argparse.Namespace, work: Path, out: Path, state: State) -> None:
    model, data = work / "qwen-real", work / "gsm8k"
    real_model(args.gguf, args.tokenizer, model)
    command = cli(
        "prep", "--source", args.gsm8k, "--out", str(data), "--tokenizer", args.tokenizer, "--val-size", str(VAL_SIZE)
    )
    run(command)
    state.data["prep_command"] = "verl-p40 " + shlex.join(command[3:])


def train_command(args: argparse.Namespace, work: Path, *, audit: bool = False) -> list[str]:
    """The mode's `verl-p40 train` of the recipe. `audit`: one step at half the prompts (AUDIT_SETS), not validated
    or saved, into folders of its own."""
    run_sets = (
        AUDIT_SETS
        if audit
        else [
            "trainer.val_before_train=true",
            f"trainer.test_freq={args.test_freq}",
            f"trainer.save_freq={args.save_freq}",
            f"trainer.total_training_steps={args.steps}",
        ]
    )
    suffix = "-audit" if audit else ""
    return recipe_command(args, work, work / f"ckpt{suffix}", work / f"logs{suffix}", run_sets)


def recipe_command(
    args: argparse.Namespace, work: Path, checkpoints: Path, logs: Path, run_sets: list[str], flags: tuple = ()
) -> list[str]:
    """`verl-p40 train` of the recipe in the mode (its profile, flags and the yardstick's sets), with `flags` after the
    mode's, the run's own `run_sets`, and the run's --override last."""
    mode = MODES[args.mode]
    return cli(
        "train",
        "--profile",
        mode["profile"],
        "--algorithm",
        args.algorithm,
        *mode["cli"],
        *flags,
        "--model",
        str(work / "qwen-real"),
        "--data",
        str(work / "gsm8k"),
        "--checkpoints",
        str(checkpoints),
        "--logs",
        str(logs),
        *run_sets,
        *mode["sets"],
        *args.override,
    )


# a run that is neither validated nor saved (the audit's step, the pair's trainers): its time is start-up and steps
UNVALIDATED_UNSAVED = ["trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1"]
AUDIT_SETS = [
    # the recipe at half its prompts a step (one update of 16): the same ops, kernels and micro-batches in half the
    # time; the audit makes a step ~2.7x slower
    "data.train_batch_size=16",
    *UNVALIDATED_UNSAVED,
    "trainer.total_training_steps=1",
]
