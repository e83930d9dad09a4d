"""The paired sign test `verl-p40 eval` gives every difference it reports: two models answered the same questions,
so only the questions where their scores differ say which is better, and under "no difference" each of those is a
fair coin (an exact two-sided binomial test)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def sign_test(better: int, worse: int) -> float:
    """Two-sided p-value of `better` against `worse` discordant pairs under p = 1/2 (1.0 when there are none)."""
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(pairs: Iterable[tuple[dict, dict]], kind: str) -> dict:
    """Over (first, second) scores of the same questions: how often only the second scores higher on `kind`, how
    often only the first, and the sign test's p-value of that split."""
    better = worse = 0
    for first, second in pairs:
        better += second[kind] > first[kind]
        worse += second[kind] < first[kind]
    # four significant digits, not decimal places: a p of 4.5e-07 must not be reported as 0
    return {"second_higher": better, "first_higher": worse, "p_value": float(f"{sign_test(better, worse):.4g}")}
