"""The doctor's `cluster` check: with --nodes above 1, every host of the Ray cluster joined and sees what the run
reads and writes."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from verl_p40.doctor.context import CheckFailed, CheckSkipped, Context
from verl_p40.outputs import made
from verl_p40.run.cluster import node_problems


def check_cluster(ctx: Context) -> str:
    """The doctor's check: with --nodes above 1, the cluster at RAY_ADDRESS has every host, and each host sees the
    model, the data and the head's checkpoints folder."""
    options = ctx.options
    if options.nodes <= 1:
        raise CheckSkipped("one host")
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        raise CheckFailed(
            f"--nodes {options.nodes} but RAY_ADDRESS is not set",
            "train through `verl-p40 cluster head` (compose: ray-head), which sets it",
        )
    checkpoints = Path(options.checkpoints).expanduser().absolute()
    marker = checkpoints / f".verl-p40-shared-{uuid.uuid4().hex[:8]}"
    with made(checkpoints, keep=False):  # a folder made for the check only is removed again (a check leaves nothing)
        marker.touch()
        try:
            paths = {"model": options.model, "data": options.data}
            problems = node_problems(
                address, {k: str(Path(v).expanduser().absolute()) for k, v in paths.items()}, str(marker)
            )
        finally:
            marker.unlink(missing_ok=True)
    if problems:
        raise CheckFailed(
            " | ".join(problems),
            "every host needs the model and data at the same paths and the "
            "checkpoints folder shared (README: More GPUs, more hosts)",
        )
    return f"{options.nodes} hosts at {address} see the model, the data and one shared checkpoints folder"
