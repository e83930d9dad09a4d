"""The monitor's figure, GPU memory and utilisation over time, and what every figure of the package is drawn with
(matplotlib, headless; each written atomically as PNG)."""

from __future__ import annotations

from pathlib import Path

from verl_p40.atomic import staged
from verl_p40.gpu.sampler import GPUSample


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, out: Path, dpi: int = 110) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged([out]) as (temp,):
        fig.savefig(temp, format="png", dpi=dpi)
    pyplot().close(fig)
    return out


def gpu_memory(samples: list[GPUSample], out: Path, title: str = "GPU memory and utilisation") -> Path:
    """Memory used (with each card's total dotted) and utilisation per GPU over time, from the monitor's samples."""
    plt = pyplot()
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
    return save(fig, out)
