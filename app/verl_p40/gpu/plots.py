"""Every figure the package draws (matplotlib, headless): the monitor's GPU memory and utilisation, and eval's
training curves. Each is written atomically as PNG."""

from __future__ import annotations

from pathlib import Path

from verl_p40.atomic import staged
from verl_p40.gpu.nvml import GPUSample


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, dpi: int = 110) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged([out]) as (temp,):
        fig.savefig(temp, format="png", dpi=dpi)
    _pyplot().close(fig)
    return out


def gpu_memory(samples: list[GPUSample], out: Path, title: str = "GPU memory and utilisation") -> Path:
    """Memory used (with each card's total dotted) and utilisation per GPU over time, from the monitor's samples."""
    plt = _pyplot()
    fig, (ax_mem, ax_util) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    start = min((s.ts for s in samples), default=0.0)
    for gpu in sorted({s.gpu for s in samples}):
        rows = [s for s in samples if s.gpu == gpu]
        t = [(s.ts - start) / 60 for s in rows]
        label = f"GPU {gpu} {rows[0].name}"
        ax_mem.plot(t, [None if s.memory_used_bytes is None else s.memory_used_bytes / 1e9 for s in rows], label=label)
        total = rows[-1].memory_total_bytes
        if total:
            ax_mem.axhline(total / 1e9, linestyle=":", linewidth=1, color="grey")
        ax_util.plot(t, [s.utilization_gpu_pct for s in rows], label=label)
    ax_mem.set_ylabel("memory used (GB)")
    ax_mem.legend(loc="upper left", fontsize=8)
    ax_util.set_ylabel("GPU utilisation (%)")
    ax_util.set_ylim(0, 105)
    ax_util.set_xlabel("minutes since first sample")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out)


CURVES = [
    ("critic/score/mean", "reward (score) mean"),
    ("actor/reward_kl_penalty", "KL to reference (in reward)"),
    ("actor/pg_loss", "actor (policy) loss"),
    ("critic/vf_loss", "critic (value) loss"),
    ("response_length/mean", "response length (tokens)"),
]


def training_curves(logs: Path, out: Path) -> bool:
    """Training curves from the trainer's console logs (logs/train-*.log) and the monitor's gpu.csv (eval's
    curves.png); False when there is nothing to draw."""
    from verl_p40.gpu.csv_log import read_gpu_csv
    from verl_p40.run.trainer_log import read_steps

    steps: dict[int, dict] = {}
    for log in sorted(Path(logs).glob("train-*.log")):
        for record in read_steps(log):
            steps[int(record["step"])] = record
    gpu_csv = Path(logs) / "gpu" / "gpu.csv"
    if not steps and not gpu_csv.exists():
        return False
    plt = _pyplot()
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
            ax.plot([(s.ts - start) / 60 for s in rows],
                    [(s.memory_used_bytes or 0) / 1e9 for s in rows], label=f"GPU {gpu}")
        peak = max(((s.memory_used_bytes or 0) for s in samples), default=0) / 1e9
        ax.set_title(f"GPU memory used (gpu-monitor), peak {peak:.2f} GB", fontsize=9)
        ax.set_xlabel("minutes", fontsize=8)
    fig.tight_layout()
    _save(fig, out, dpi=100)
    return True
