import importlib.util

import pytest

from verl_p40 import reward

# Realistic model outputs: (response, ground truth). Written for this test; kinds as the issue lists them.
CORPUS = [
    ("Janet has 16 - 3 - 4 = 9 eggs. 9 * 2 = 18.\n#### 18", "18"),  # correct
    ("She makes 9 * 2 = $18 every day.\n#### 20", "18"),  # wrong
    ("She makes 9 * 2 = 18 dollars every day. The answer is 18.", "18"),  # missing ####
    ("Total is 1,000 + 234 = 1,234.\n#### 1,234", "1234"),  # commas
    ("He loses 5 - 12 = -7.\n#### -7", "-7"),  # negative
    ("Each costs 7.5 / 3 = 2.5\n#### 2.5", "2.5"),  # decimal
    ("So the answer is 42.\n#### 42\n\nI hope this helps! Let me know if you have questions.", "42"),  # trailing text
    ("#### 10\nWait, let me recompute: 3 * 4 = 12.\n#### 12", "12"),  # two answers, last wins
    ("The answer is \\boxed{72}.", "72"),  # boxed, no ####
    ("#### $18", "18"),  # dollar sign after ####
    ("####18", "18"),  # no space after ####
    ("#### 18.", "18"),  # trailing full stop captured by verl's pattern
    ("#### 1,234.00", "1234"),  # decimals with zeros
    ("", "5"),  # empty response
    ("x" * 400 + "\n#### 5", "5"),  # long response, answer at the end
    ("#### 5\n" + "y" * 400, "5"),  # answer clipped away by the 300-character window
    ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72", "72"),
    ("The final answer is 3,500.", "3500"),  # flexible: commas dropped
    ("It takes 2/2 = 1 bolt. Total 2 + 1 = 3 bolts.", "3"),  # flexible: last number
    ("#### -0.5", "-0.5"),
]


def _verl_gsm8k(verl_dir):
    spec = importlib.util.spec_from_file_location("verl_gsm8k", verl_dir / "utils" / "reward_score" / "gsm8k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def verl_gsm8k():
    from verl_p40.patches import default_verl_dir

    return _verl_gsm8k(default_verl_dir())


@pytest.mark.parametrize("response, truth", CORPUS)
def test_strict_default_equals_verl(verl_gsm8k, response, truth):
    assert reward.compute_score("openai/gsm8k", response, truth)["score"] == float(
        verl_gsm8k.compute_score(response, truth)
    )


def test_corpus_covers_both_outcomes(verl_gsm8k):
    scores = [verl_gsm8k.compute_score(r, t) for r, t in CORPUS]
    assert 0 < sum(scores) < len(scores)


def _score(*args, **kwargs) -> float:
    return reward.compute_score("s", *args, **kwargs)["score"]


def test_flexible_credits_last_number():
    assert _score("The answer is \\boxed{72}.", "72", method="flexible") == 1.0
    assert _score("The final answer is 3,500.", "3500", method="flexible") == 1.0
    assert _score("Cost: 18.00", "18", method="flexible") == 1.0
    assert _score("I think 17.", "18", method="flexible") == 0.0
    assert _score("no digits here", "18", method="flexible") == 0.0


def test_format_bonus_is_paid_only_with_a_correct_answer():
    assert _score("#### 17", "18", format_bonus=0.1) == 0.0  # the format alone earns nothing
    assert _score("#### 17", "18", method="flexible", format_bonus=0.1) == 0.0
    assert _score("#### 18", "18", format_bonus=0.1) == pytest.approx(1.1)
    assert _score("#### 18", "18", method="flexible", format_bonus=0.1) == pytest.approx(1.1)
    assert _score("answer 18", "18", format_bonus=0.1) == 0.0
    assert _score("answer 18", "18", method="flexible", format_bonus=0.1) == 1.0


def test_parts_are_returned_beside_the_reward():
    """verl turns every key but `score` into a metric: `acc` is the accuracy by the run's method, and the strict,
    flexible and format parts are always there, whatever the method, so runs with different rewards compare."""
    result = reward.compute_score("s", "so \\boxed{18}", "18", method="flexible", format_bonus=0.25)
    assert result == {"score": 1.0, "acc": 1.0, "strict": 0.0, "flexible": 1.0, "format": 0.0}
    result = reward.compute_score("s", "#### 18", "18", format_bonus=0.25)
    assert result == {"score": 1.25, "acc": 1.0, "strict": 1.0, "flexible": 1.0, "format": 1.0}
    assert reward.compute_score("s", "#### 17", "18") == {
        "score": 0.0,
        "acc": 0.0,
        "strict": 0.0,
        "flexible": 0.0,
        "format": 1.0,
    }
    assert reward.score_parts("#### 18", "18") == {"strict": 1.0, "flexible": 1.0, "format": 1.0}


def test_unknown_method_rejected():
    with pytest.raises(ValueError):
        reward.compute_score("s", "#### 1", "1", method="fuzzy")


def test_loads_as_verl_custom_reward_file():
    """verl imports the file by path as a stand-alone module: it must not need the verl_p40 package."""
    spec = importlib.util.spec_from_file_location("custom_module", reward.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("openai/gsm8k", "#### 3", "3", extra_info={"index": 0})["score"] == 1.0
