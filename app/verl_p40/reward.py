"""GSM8K reward for verl's `custom_reward_function`.

verl loads this file by path (`custom_reward_function.path`) as a stand-alone module, so it imports nothing
from verl_p40. The default is verl 0.5.0's own GSM8K rule (`verl.utils.reward_score.gsm8k.compute_score`):
1.0 when the last `#### N` in the response equals the ground truth, else 0.0. Options, passed as
`custom_reward_function.reward_kwargs`:

- `method="flexible"`: take the last number in the response instead of requiring `#### N` (a model that
  answers with `\\boxed{42}` or "The answer is 42." then gets credit). Unlike verl's own flexible mode it drops
  thousands separators and a trailing full stop and compares numerically (`18.00` equals `18`);
- `format_bonus=B`: add B when a correct answer also uses the `#### N` format. It is never paid for a wrong
  answer: a bonus for the format alone taught the model to write `#### N` under shorter, worse answers (the
  learning issue's table: strict 0 -> 20.7 %, flexible 26.2 -> 21.8 %);
- `score`: the reward of a correct answer (1.0).

`compute_score` returns verl's reward as `score` together with its parts (`acc`: correct by `method`; `strict`,
`flexible`, `format`: each 0 or 1). verl's validation turns every part into a metric (`val-core/.../acc` is the
accuracy, not the reward), and a patch-set edit does the same for training steps (`reward/<part>/mean`), so a run
shows skill apart from format. `verl-p40 eval` scores with `score_parts` too: the trainer and eval cannot disagree.
"""

from __future__ import annotations

import re

# verl clips to the last 300 characters before matching; keep identical behaviour.
_CLIP_CHARS = 300
# the final answer line: verl's own GSM8K preprocessing and reward use this pattern (data.gsm8k reads it from here)
ANSWER_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE_RE = re.compile(r"(\-?[0-9\.\,]+)")
METHODS = ("strict", "flexible")


def extract_answer(solution_str: str, method: str = "strict") -> str | None:
    """The final answer the response commits to, normalised like verl's, or None."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    text = solution_str[-_CLIP_CHARS:]
    if method == "strict":
        found = ANSWER_RE.findall(text)
        return found[-1].replace(",", "").replace("$", "") if found else None
    for candidate in reversed(_FLEXIBLE_RE.findall(text)):
        normalised = candidate.replace(",", "").rstrip(".")
        if normalised not in ("", "-"):
            return normalised
    return None


def _same_number(answer: str, ground_truth: str) -> bool:
    if answer == ground_truth:
        return True
    try:
        return float(answer) == float(ground_truth)
    except ValueError:
        return False


def has_format(solution_str: str) -> bool:
    """True when the response ends its reasoning with the `#### N` answer line GSM8K asks for."""
    return extract_answer(solution_str, "strict") is not None


def score_answer(solution_str: str, ground_truth: str, method: str = "strict", score: float = 1.0) -> float:
    answer = extract_answer(solution_str, method)
    if answer is None:
        return 0.0
    if method == "strict":  # verl's rule, string equality
        return score if answer == ground_truth else 0.0
    return score if _same_number(answer, ground_truth) else 0.0


def score_parts(solution_str: str, ground_truth: str) -> dict[str, float]:
    """Strict and flexible correctness and the `#### N` format of one answer, each 0.0 or 1.0."""
    truth = str(ground_truth)
    return {
        "strict": score_answer(solution_str, truth, "strict"),
        "flexible": score_answer(solution_str, truth, "flexible"),
        "format": 1.0 if has_format(solution_str) else 0.0,
    }


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    method: str = "strict",
    format_bonus: float = 0.0,
    score: float = 1.0,
) -> dict[str, float]:
    """verl's `custom_reward_function` entry point (name: `compute_score`): the reward as `score`, with its parts."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    parts = score_parts(solution_str, ground_truth)
    correct = parts[method]
    reward = correct * score + (format_bonus if correct and parts["format"] else 0.0)
    return {"score": float(reward), "acc": correct, **parts}
