"""What one plan step adds to the plan (`Part`): verl overrides, the trainer's environment and notes; and the origin
of a value verl-p40 sets on its own account."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_p40.plan.verlconfig import Override

MINE = "verl-p40 options"


@dataclass(frozen=True)
class Part:
    """What one step adds to the plan."""

    overrides: list[Override] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
