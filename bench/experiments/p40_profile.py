"""GPU bench: the `p40` profile under a 24 GB cap, against the seed tutorial's settings, through `verl-p40 train`.

    python bench/experiments/p40_profile.py --model /tmp/qwen-random --data /tmp/gsm8k --out bench/results

Writes p40-profile-<date>.json (per-step verl timings, tokens/s, peak memory from torch and NVML, the exact
commands, GPU and versions) and p40-profile-<date>.png (time per PPO phase, both runs side by side).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lib.ppo_runner import PHASES, environment, run_arguments, run_train

SEED_SETTINGS = [  # the seed tutorial's ppo_config.yaml, with what a P40 forces: HF rollout, fp32 (its sed)
    "data.train_batch_size=1",
    "data.max_prompt_length=256",
    "data.max_response_length=256",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "critic.optim.lr=1e-5",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "algorithm.use_kl_in_reward=false",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
    "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    "critic.model.fsdp_config.param_offload=false",
    "critic.model.fsdp_config.optimizer_offload=false",
    "actor_rollout_ref.model.override_config.attn_implementation=eager",
    "critic.model.override_config.attn_implementation=eager",
]


def main() -> None:
    parser = run_arguments("/tmp/bench-p40", 5)
    parser.add_argument("--seed-steps", type=int, default=10)
    parser.add_argument(
        "--batches",
        default=None,
        help="comma list of train_batch_size to try, largest first; the first that runs is kept "
        "(mini-batch = batch/4). Default: the profile's",
    )
    parser.add_argument("--skip-seed", action="store_true")
    args = parser.parse_args()

    common = [
        "--profile",
        "p40",
        "--model",
        args.model,
        "--data",
        args.data,
        "--gpu-memory-cap-gb",
        str(args.cap_gb),
        "--set",
        "trainer.save_freq=-1",
        "--set",
        "trainer.test_freq=-1",
        "--set",
        "trainer.val_before_train=false",
        "--set",
        "trainer.ray_wait_register_center_timeout=120",
    ]
    from verl_p40.plan.profiles import load

    batches = (
        [int(b) for b in args.batches.split(",")] if args.batches else [load("p40").verl["data"]["train_batch_size"]]
    )
    attempts = []
    for batch in batches:
        p40 = run_train(
            f"p40-profile-batch{batch}",
            [
                *common,
                "--checkpoints",
                f"{args.work}/ckpt-p40-{batch}",
                f"data.train_batch_size={batch}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, batch // 4)}",
                f"trainer.total_training_steps={args.steps}",
            ],
            Path(args.work) / f"logs-p40-{batch}",
            timeout=400,
        )
        if p40["returncode"] == 0 and p40["steps"]:
            break
        attempts.append(
            {k: p40[k] for k in ("name", "returncode", "command", "wall_s", "nvml_peak_process_used_gb")}
            | {"error": _last_error(p40["log"])}
        )
    runs = [p40]
    if not args.skip_seed:
        runs.append(
            run_train(
                "seed-settings",
                [
                    *common,
                    "--checkpoints",
                    f"{args.work}/ckpt-seed",
                    *SEED_SETTINGS,
                    f"trainer.total_training_steps={args.seed_steps}",
                ],
                Path(args.work) / "logs-seed",
                timeout=300,
            )
        )
    result = {"environment": environment(), "runs": runs, "failed_larger_batches": attempts}
    if len(runs) == 2 and runs[0]["summary"] and runs[1]["summary"]:
        a, b = runs[0]["summary"]["prompts_per_s"], runs[1]["summary"]["prompts_per_s"]
        result["prompts_per_s"] = {
            "p40_profile": a,
            "seed_settings": b,
            "speedup": round(a / b, 2) if a and b else None,
        }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"p40-profile-{time.strftime('%Y-%m-%d')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(runs, stem.with_suffix(".png"))
    print(
        json.dumps({r["name"]: r["summary"] for r in runs} | {"prompts_per_s": result.get("prompts_per_s")}, indent=1)
    )


def _last_error(log: str) -> str:
    lines = [
        line.strip()
        for line in Path(log).read_text(errors="replace").splitlines()
        if "Error" in line or "out of memory" in line
    ]
    return lines[-1][-400:] if lines else ""


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    phases = [p for p in PHASES if p != "step"]
    for i, run in enumerate(r for r in runs if r["summary"]):
        left = 0.0
        for j, phase in enumerate(phases):
            width = run["summary"][f"mean_{phase}_s"]
            axes[0].barh(i, width, left=left, color=plt.cm.tab10(j), label=phase if i == 0 else None)
            left += width
        axes[0].text(
            left,
            i,
            f" {run['summary']['mean_step_s']:.1f} s/step, {run['summary']['prompts_per_s']} prompts/s",
            va="center",
        )
        steps = [s["step"] for s in run["steps"]]
        axes[1].plot(steps, [s.get("timing_s/step", 0) for s in run["steps"]], marker="o", label=run["name"])
    axes[0].set_yticks(range(len(runs)), [r["name"] for r in runs])
    axes[0].set_xlabel("mean seconds per PPO step (after step 1)")
    axes[0].legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    axes[0].set_xlim(0, max(r["summary"].get("mean_step_s", 0) for r in runs if r["summary"]) * 1.6)
    axes[1].set_xlabel("PPO step")
    axes[1].set_ylabel("seconds")
    axes[1].set_title("time per step")
    axes[1].legend()
    fig.suptitle("verl 0.5.0 PPO, Qwen2.5-0.5B shape, fp32, 24 GB cap: p40 profile vs the seed tutorial's settings")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
