"""One named edit of the patch set (its own module, so that the edit lists import it without importing the package
that applies them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    name: str
    file: str  # relative to the verl package folder
    old: str | None  # None: create the file with `new`
    new: str
    why: str
