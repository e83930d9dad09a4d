"""`verl-p40 monitor`'s options, declared once (`verl_p40.options`): the command line builds them and `gpu.monitor.main`
takes them whole, so a new flag touches this dataclass and the code that uses it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_p40 import defaults
from verl_p40.gpu.nvml import parse_gpus
from verl_p40.options import FILE, FOLDER, option

MONITOR_INTERVAL_ENV = "VERL_P40_MONITOR_INTERVAL"
MONITOR_ALERT_ENV = "VERL_P40_MONITOR_ALERT_MEM_PCT"  # the gpu-monitor service's warning (MONITOR_ALERT_MEM_PCT)


@dataclass(frozen=True)
class MonitorOptions:
    interval: float = option(1.0, "seconds between samples", env=MONITOR_INTERVAL_ENV, kind=float, low=0.05)
    out: str = option(
        os.path.join(defaults.LOGS.value, "gpu"), "output folder", env=defaults.LOGS.env, below="gpu", path=FOLDER
    )
    port: int | None = option(None, "serve Prometheus metrics on this port", kind=int, low=1, high=65535)
    bind: str = option("127.0.0.1", "address for the metrics port")
    gpus: tuple[int, ...] | None = option(
        None, "all, or GPU indices as nvidia-smi numbers them (e.g. 0,1)", shown="all", convert=parse_gpus
    )
    once: bool = option(False, "take one sample, print it, exit", switch=True)
    samples: int | None = option(None, "stop after N samples", kind=int, low=1, shown="run until SIGTERM/SIGINT")
    alert_mem_pct: float | None = option(
        None, "warn when a GPU's memory use crosses N %%", env=MONITOR_ALERT_ENV, kind=float, low=0, high=100
    )
    max_csv_mb: float = option(50.0, "rotate gpu.csv at this size", kind=float, low=0.01)
    plot: str | None = option(None, "only redraw the picture from a gpu.csv", metavar="CSV", path=FILE)
    plot_out: str | None = option(None, "with --plot: where to write the PNG", shown="beside the CSV", path=FILE)
