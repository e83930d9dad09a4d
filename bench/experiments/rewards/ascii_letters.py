"""Learning-check reward for a random-weight model: the fraction of response characters that are ASCII letters.

A random-weight Qwen2.5 emits tokens from all of its 151k-token vocabulary (many of them CJK, symbols, bytes),
so its responses start far below 1.0 and every response gets a graded reward: a signal PPO can climb within
tens of steps. (A "shorter than K tokens" reward gives no signal here: a random model almost never emits EOS.)
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_options):
    text = "".join(solution_str.split())
    if not text:
        return 0.0
    return sum(("a" <= ch <= "z") or ("A" <= ch <= "Z") for ch in text) / len(text)
