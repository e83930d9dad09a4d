"""GPU bench: does PPO under the p40 profile learn? A random-weight model, a reward it can climb.

    python bench/experiments/learning_check.py --model /tmp/qwen-random --data /tmp/gsm8k --out bench/results

Reward: bench/experiments/rewards/ascii_letters.py (fraction of ASCII letters in the response). Writes
learning-check-<date>.json and .png (reward mean per step).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lib.ppo_runner import environment, run_arguments, run_train

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = run_arguments("/tmp/bench-learn", 50)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--actor-lr", default="3e-5")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    train_args = [
        "--profile",
        "p40",
        "--model",
        args.model,
        "--data",
        args.data,
        "--gpu-memory-cap-gb",
        str(args.cap_gb),
        "--checkpoints",
        f"{args.work}/ckpt",
        "--set",
        "trainer.save_freq=-1",
        "--set",
        "trainer.test_freq=-1",
        "--set",
        "trainer.val_before_train=false",
        f"custom_reward_function.path={HERE / 'rewards' / 'ascii_letters.py'}",
        f"data.max_response_length={args.response_length}",
        f"actor_rollout_ref.actor.optim.lr={args.actor_lr}",
        f"trainer.total_training_steps={args.steps}",
        f"data.train_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, args.batch // 2)}",
    ]
    run = run_train("learning-check", train_args, Path(args.work) / "logs", timeout=420)
    scores = [s.get("critic/score/mean") for s in run["steps"]]
    k = max(1, min(5, len(scores) // 4))
    result = {
        "environment": environment(),
        "run": run,
        "reward": "bench/experiments/rewards/ascii_letters.py: fraction of ASCII letters in the response",
        "first_mean": round(sum(scores[:k]) / k, 4) if scores else None,
        "last_mean": round(sum(scores[-k:]) / k, 4) if scores else None,
        "window_steps": k,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"learning-check-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [s["step"] for s in run["steps"]]
    ax.plot(steps, scores, marker=".", label="reward mean (critic/score/mean)")
    ax.set_xlabel("PPO step")
    ax.set_ylabel("reward")
    ax.set_title(f"learning check: random-weight Qwen2.5-0.5B shape, p40 profile, lr {args.actor_lr}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=110)
    print(json.dumps({k: result[k] for k in ("first_mean", "last_mean", "window_steps")}))


if __name__ == "__main__":
    main()
