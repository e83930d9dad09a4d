# Installed into verl by verl-p40's patch set as verl/utils/p40_best.py, beside p40_checkpoints.py, which imports it,
# and p40_run_folder.py, which it reads the per-question results through; verl_p40.models.checkpoints uses the same
# file for `best`. Standard library only: it runs in verl's trainer process.
"""Which saved step `best` hands over: the newest validated one, unless an earlier one beats it beyond the noise.

The rule, decided before any test score was looked at (issue 59):

1. The reference is the newest saved step that was validated. Training is meant to improve the model as it goes,
   and the last step is what the run's length was chosen for: without evidence against it, it is the one to keep.
2. The challenger is the earlier saved, validated step of highest validation accuracy (the later on a tie): the
   only earlier step that can be handed over, and the one retention keeps on disk.
3. The challenger is handed over only when it beats the reference on the same validation questions by a paired
   exact test: of the questions exactly one of the two answers right, it must win so many that a one-sided sign test
   (McNemar's exact test) gives p < 0.05 / k, k the number of earlier validated steps it was chosen among
   (Bonferroni: whatever k, noise alone moves `best` off the newest step at most 5 % of the time).
4. Without both steps' per-question results (a run from before verl-p40 kept them, a file missing or cut short),
   nothing can be paired: the reference, and the line says why.

Why not the highest single validation accuracy (the rule before): 256 validation questions give a standard error of
~3 points, and in the two committed 60-step runs of the default (bench/results/horizon-2026-12-03,
default-2026-12-04) that rule handed over a step picked by validation noise that scored ~1.8 points under the last
step on the test split, both times. A model that collapses late still loses `best` to an earlier step: a drop of
several points on 256 questions is far beyond the noise.

Per-question results are verl's own validation dump (`trainer.validation_data_dir`, set by verl-p40's plan to
`<experiment>/validation`): one `<step>.jsonl` per validation, a line per answer with its `input` (the prompt),
`score` and the reward's parts (`acc`). Answers are paired by their prompt, so verl's order does not matter; with
several answers per prompt, a question's result is the mean of its answers.
"""

from __future__ import annotations

import math

from .p40_run_folder import read_results, results_path

LEVEL = 0.05  # the family-wise one-sided level of the paired test


def sign_test(wins: int, losses: int) -> float:
    """One-sided exact sign test (McNemar's exact test on the discordant pairs): P(X >= wins), X ~ Bin(n, 1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def paired(root: str, challenger: int, reference: int) -> tuple[int, int, str | None]:
    """(questions better at `challenger`, questions better at `reference`, None), or (0, 0, why they cannot pair)."""
    ours, why = read_results(results_path(root, challenger))
    theirs, why_theirs = read_results(results_path(root, reference))
    if ours is None or theirs is None:
        return 0, 0, why or why_theirs
    if set(ours) != set(theirs):
        return (
            0,
            0,
            (
                f"{results_path(root, challenger)} and {results_path(root, reference)} hold different questions "
                f"({len(ours)} and {len(theirs)}); not the same validation slice"
            ),
        )
    wins = sum(1 for q in ours if ours[q] > theirs[q])
    losses = sum(1 for q in ours if ours[q] < theirs[q])
    return wins, losses, None


def challenger_step(validations: dict[int, float], saved, before: int | None = None) -> int | None:
    """Of the saved, validated steps (step 0, the model before training, is no checkpoint) before `before`, the one of
    highest validation accuracy, the later on a tie; None when there is none."""
    candidates = {s: validations[s] for s in saved if s in validations and s > 0 and (before is None or s < before)}
    return max(candidates, key=lambda s: (candidates[s], s)) if candidates else None


def choose(root: str, validations: dict[int, float], saved) -> dict | None:
    """The step `best` hands over, by the rule above, with what decided it (`why`, one sentence); None when no saved
    step was validated."""
    saved = set(saved)
    validated = sorted(s for s in saved if s in validations and s > 0)
    if not validated:
        return None
    reference = validated[-1]
    challenger = challenger_step(validations, saved, before=reference)
    earlier = len([s for s in validations if 0 < s < reference])  # every earlier step it could have been chosen among
    paired_with = None
    step = reference
    if challenger is None or validations[challenger] <= validations[reference]:
        why = "the newest validated step; no earlier saved step validated higher"
    else:
        wins, losses, problem = paired(root, challenger, reference)
        seen = f"step {challenger} validated higher ({validations[challenger]:.1%})"
        if problem:
            why = f"the newest validated step; {seen} but cannot be paired with it: {problem}"
        else:
            p, level = sign_test(wins, losses), LEVEL / earlier
            paired_with = {
                "challenger": challenger,
                "wins": wins,
                "losses": losses,
                "p": p,
                "level": level,
                "earlier_steps": earlier,
            }
            test = (
                f"{wins} questions right only at step {challenger}, {losses} only at step {reference}: one-sided "
                f"sign test p = {p:.2g}"
            )
            if p < level:
                step = challenger
                why = (
                    f"better than the newest validated step, {reference} ({validations[reference]:.1%}), beyond "
                    f"the noise ({test} < {LEVEL} / {earlier} earlier steps)"
                )
            else:
                why = f"the newest validated step; {seen}, within the noise ({test}, not < {LEVEL} / {earlier})"
    first, latest = min(validations), max(validations)
    return {
        "step": step,
        "accuracy": validations[step],
        "rule": "newest validated" if step == reference else "earlier, beyond the noise",
        "why": why,
        "newest_validated_step": reference,
        "paired": paired_with,
        "first_step": first,
        "first_accuracy": validations[first],
        "gain_over_first": validations[step] - validations[first],
        "latest_step": latest,
        "gain_over_latest": validations[step] - validations[latest],
    }


def line(best: dict, where: str = "") -> str:
    """`step N<where> (validation accuracy A, +G points over step 0), <why>`."""
    return (
        f"step {best['step']}{where} (validation accuracy {best['accuracy']:.1%}, {100 * best['gain_over_first']:+.1f} "
        f"points over step {best['first_step']}), {best['why']}"
    )
