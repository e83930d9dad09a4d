"""Two runs' answers to the same questions, text for text: where the first differing pair parts."""

from __future__ import annotations


def first_divergence(a: str, b: str, before: int, after: int) -> tuple[int, str, str, str]:
    """(characters in common, up to `before` of them, then up to `after` of each continuation)."""
    at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return at, a[max(0, at - before) : at], a[at : at + after], b[at : at + after]
