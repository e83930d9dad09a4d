"""Before/after of the two HF-rollout edits on the real-weight model (same machine, data, profile, command).

Reads two `verl-p40 train` logs of bench/experiments/real_weights.py's trainer command (the first with verl 0.5.0's
HF rollout as patched before the edits, the second with them) and `verl-p40 eval`'s report on the validation slice, and
writes rollout-check-<date>.json and .png: the trainer's greedy validation reward at step 0 (before any update)
next to plain generate()'s accuracy, and the sampled training reward and truncation rate of the first steps.

    python3 bench/experiments/rollout_check.py --before LOG --after LOG --eval report.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from verl_p40.run.trainer_log import read_steps

KEYS = ("critic/score/mean", "response_length/mean", "response_length/clip_ratio", "actor/entropy")
VAL = "val-core/openai/gsm8k/reward/mean@1"


def summarise(log: Path, steps: int) -> dict:
    rows = {int(s["step"]): s for s in read_steps(log)}
    return {
        "log": log.name,
        "val_reward_step0": rows.get(0, {}).get(VAL),
        **{key: [rows[k].get(key) for k in range(1, steps + 1) if k in rows] for key in KEYS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--after", required=True, type=Path)
    parser.add_argument("--eval", required=True, type=Path, help="verl-p40 eval's report.json on the val slice")
    parser.add_argument("--eval-label", default="verl-p40 eval", help="how the eval bar is labelled")
    parser.add_argument("--steps", type=int, default=4, help="first N training steps to compare")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    base = json.loads(args.eval.read_text())["models"]["base"]
    result = {
        "what": "trainer's greedy validation reward (flexible + 0.1 format bonus) at step 0 on GSM8K test rows "
        "256..383, and sampled training reward of the first steps, before/after the HF rollout edits",
        "plain_generate_eval": {
            "label": args.eval_label,
            **{k: base[k] for k in ("questions", "accuracy_flexible", "format_rate")},
        },
        "before_edits": summarise(args.before, args.steps),
        "after_edits": summarise(args.after, args.steps),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"rollout-check-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, stem.with_suffix(".png"))
    print(json.dumps(result, indent=1))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    labels = ("before_edits", "after_edits")
    flexible = result["plain_generate_eval"]["accuracy_flexible"] + 0.1 * result["plain_generate_eval"]["format_rate"]
    axes[0].bar(
        ["verl val\nbefore edits", "verl val\nafter edits", result["plain_generate_eval"]["label"]],
        [result[k]["val_reward_step0"] or 0 for k in labels] + [flexible],
        color=["#c44", "#4a4", "#888"],
    )
    axes[0].set_title("greedy reward at step 0 (no update yet)", fontsize=10)
    for ax, key, title in (
        (axes[1], "critic/score/mean", "sampled training reward"),
        (axes[2], "response_length/clip_ratio", "responses cut at 320 tokens"),
    ):
        for label, colour in zip(labels, ("#c44", "#4a4")):
            values = result[label][key]
            ax.plot(range(1, len(values) + 1), values, marker="o", color=colour, label=label.replace("_", " "))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("PPO step")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
