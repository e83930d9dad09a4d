"""eval's curves.png: the training curves from the trainer's console logs and the GPU memory the monitor recorded."""

from __future__ import annotations

from pathlib import Path

from verl_p40.gpu.csv_log import read_gpu_csv
from verl_p40.gpu.plots import pyplot
from verl_p40.patches.p40_run_folder import VALIDATION_KEY
from verl_p40.run.trainer_log import read_steps

CURVES = [
    ("critic/score/mean", "reward (score) mean"),
    ("reward/acc/mean", "sampled answers correct (the reward's method)"),
    (VALIDATION_KEY, "validation accuracy, greedy (val.parquet, held out by prep)"),
    ("reward/format/mean", "answers in the '#### N' format"),
    ("actor/reward_kl_penalty", "KL to reference (in reward)"),
    ("actor/kl_loss", "KL to reference (as a loss: GRPO)"),
    ("actor/pg_loss", "actor (policy) loss"),
    ("critic/vf_loss", "critic (value) loss"),
    ("response_length/mean", "response length (tokens)"),
]


def figure(logs: Path):
    """Training curves from the trainer's console logs (logs/train-*.log) and the monitor's gpu.csv (eval saves them as
    curves.png, with `verl_p40.gpu.plots.save`); None when there is nothing to draw."""
    steps: dict[int, dict] = {}
    for log in sorted(Path(logs).glob("train-*.log")):
        for record in read_steps(log):
            steps[int(record["step"])] = record
    gpu_csv = Path(logs) / "gpu" / "gpu.csv"
    if not steps and not gpu_csv.exists():
        return None
    plt = pyplot()
    panels = [(key, title) for key, title in CURVES if any(key in s for s in steps.values())]
    count = len(panels) + (1 if gpu_csv.exists() else 0)
    fig, axes = plt.subplots(count, 1, figsize=(9, 2.2 * count), squeeze=False)
    ordered = [steps[k] for k in sorted(steps)]
    for ax, (key, title) in zip(axes[:, 0], panels):
        points = [(s["step"], s[key]) for s in ordered if key in s]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("PPO step", fontsize=8)
    if gpu_csv.exists():
        samples = read_gpu_csv(gpu_csv)
        ax = axes[-1, 0]
        start = min((s.ts for s in samples), default=0.0)
        for gpu in sorted({s.gpu for s in samples}):
            rows = [s for s in samples if s.gpu == gpu]
            ax.plot(
                [(s.ts - start) / 60 for s in rows],
                [(s.memory_used_bytes or 0) / 1e9 for s in rows],
                label=f"GPU {gpu}",
            )
        peak = max(((s.memory_used_bytes or 0) for s in samples), default=0) / 1e9
        ax.set_title(f"GPU memory used (gpu-monitor), peak {peak:.2f} GB", fontsize=9)
        ax.set_xlabel("minutes", fontsize=8)
    fig.tight_layout()
    return fig
