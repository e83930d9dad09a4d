"""`verl-p40 monitor`: sample every GPU through NVML, keep a CSV, serve Prometheus metrics, summarise and plot.

Per GPU and interval: memory used/total, utilisation (gpu, memory), temperature, power draw/limit, SM and memory
clocks, throttle reasons, PCIe throughput; per process: pid, name, used memory. Rows go to `DIR/gpu.csv` (header
once, appended across restarts, rotated by size) and processes to `DIR/gpu-processes.csv`; the same values are
Prometheus gauges on `--port`. On SIGTERM/SIGINT it writes `DIR/gpu-summary.json` and `DIR/gpu.png`.

DIR is the monitor's output folder (`verl_p40.outputs`): a file there of one of its names that it did not write (per
the folder's ledger, or recognised as an earlier version's by its contents) or a link stops it before the first
sample; its own files are continued (the CSVs) or replaced (the summary and the plot), each write whole or not at all.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from verl_p40 import UserError
from verl_p40.gpu import plots
from verl_p40.gpu.csv_log import CsvLog, header, read_gpu_csv, rotated
from verl_p40.gpu.options import MonitorOptions
from verl_p40.gpu.prometheus import Exporter
from verl_p40.gpu.sampler import GPU_COLUMNS, PROCESS_COLUMNS, GPUSample, NvmlSource, ProcessSample
from verl_p40.outputs import OutputFolder

# ------------------------------------------------------------------------------------------------ its files

CSVS = {"gpu.csv": GPU_COLUMNS, "gpu-processes.csv": PROCESS_COLUMNS}
KEEP = 3  # rotated parts of each CSV
SUMMARY, PLOT = "gpu-summary.json", "gpu.png"
NAMES = [*(n for name in CSVS for n in rotated(name, KEEP)), SUMMARY, PLOT]
_PNG = b"\x89PNG\r\n\x1a\n"


def earlier_output(name: str, path: Path) -> bool:
    """Whether `path`, not in the folder's ledger, is what a monitor wrote before the ledger (a CSV under its header,
    a summary of its keys, a PNG beside such a summary): continued or replaced like its own."""
    if not path.is_file() or path.is_symlink():
        return False
    csv_name = re.sub(r"\.\d+$", "", name)
    try:
        if csv_name in CSVS:
            return header(path) == CSVS[csv_name]
        if name == SUMMARY:
            if path.stat().st_size > 64 * 2**20:
                return False
            found = json.loads(path.read_text(encoding="utf-8"))
            return isinstance(found, dict) and {"duration_s", "samples", "gpus", "processes"} <= set(found)
        if name == PLOT:
            with open(path, "rb") as handle:
                return handle.read(len(_PNG)) == _PNG and earlier_output(SUMMARY, path.with_name(SUMMARY))
    except (OSError, ValueError, RecursionError):
        return False
    return False


def output_folder(out: Path, command: str = "monitor", flag: str = "--out") -> OutputFolder:
    """The folder the monitor writes its files into (`command`: who runs it, the bench too)."""
    return OutputFolder(Path(out), flag, command, adopt=earlier_output)


# ------------------------------------------------------------------------------------------------ summary


def _p95(values: list[float]) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return round(statistics.quantiles(values, n=20, method="inclusive")[-1], 2)


@dataclass
class Summary:
    started: float | None = None
    ended: float | None = None
    samples: int = 0
    gpus: dict[int, dict] = field(default_factory=dict)
    processes: dict[str, dict] = field(default_factory=dict)
    _util: dict[int, list[float]] = field(default_factory=dict)

    def add(self, gpu_rows: list[GPUSample], proc_rows: list[ProcessSample]) -> None:
        for row in gpu_rows:
            self.started = row.ts if self.started is None else min(self.started, row.ts)
            self.ended = row.ts if self.ended is None else max(self.ended, row.ts)
            self.samples += 1
            g = self.gpus.setdefault(
                row.gpu,
                {
                    "name": row.name,
                    "peak_memory_used_bytes": 0,
                    "memory_total_bytes": row.memory_total_bytes,
                    "peak_at": None,
                },
            )
            if row.memory_used_bytes is not None and row.memory_used_bytes > g["peak_memory_used_bytes"]:
                g["peak_memory_used_bytes"], g["peak_at"] = row.memory_used_bytes, row.ts
            if row.utilization_gpu_pct is not None:
                self._util.setdefault(row.gpu, []).append(row.utilization_gpu_pct)
        for proc in proc_rows:
            key = f"{proc.gpu}:{proc.pid}"
            p = self.processes.setdefault(
                key, {"gpu": proc.gpu, "pid": proc.pid, "name": proc.name, "peak_used_memory_bytes": 0}
            )
            if proc.used_memory_bytes is not None:
                p["peak_used_memory_bytes"] = max(p["peak_used_memory_bytes"], proc.used_memory_bytes)

    def as_dict(self) -> dict:
        gpus = {}
        for index, g in sorted(self.gpus.items()):
            util = self._util.get(index, [])
            gpus[str(index)] = {
                **g,
                "peak_memory_used_gb": round(g["peak_memory_used_bytes"] / 1e9, 3),
                "utilization_gpu_mean_pct": round(sum(util) / len(util), 2) if util else None,
                "utilization_gpu_p95_pct": _p95(util),
            }
        return {
            "duration_s": round((self.ended or 0) - (self.started or 0), 1),
            "started": self.started,
            "ended": self.ended,
            "samples": self.samples,
            "gpus": gpus,
            "processes": sorted(self.processes.values(), key=lambda p: -p["peak_used_memory_bytes"]),
        }


class Alerts:
    def __init__(self, threshold_pct: float | None, log=print):
        self.threshold, self.log = threshold_pct, log
        self.above: set[int] = set()

    def check(self, rows: list[GPUSample]) -> list[str]:
        lines = []
        if self.threshold is None:
            return lines
        for row in rows:
            if not row.memory_used_bytes or not row.memory_total_bytes:
                continue
            pct = 100.0 * row.memory_used_bytes / row.memory_total_bytes
            if pct >= self.threshold and row.gpu not in self.above:
                self.above.add(row.gpu)
                lines.append(
                    f"WARNING: GPU {row.gpu} ({row.name}) memory at {pct:.1f}% "
                    f"({row.memory_used_bytes / 1e9:.2f} of {row.memory_total_bytes / 1e9:.2f} GB), "
                    f"over the {self.threshold:g}% alert threshold: an out-of-memory kill may follow"
                )
            elif pct < self.threshold and row.gpu in self.above:
                self.above.discard(row.gpu)
                lines.append(f"GPU {row.gpu} memory back under {self.threshold:g}% ({pct:.1f}%)")
        for line in lines:
            self.log(line)
        return lines


def format_table(rows: list[GPUSample], procs: list[ProcessSample]) -> str:
    def fmt(value, scale=1.0, spec=".0f"):
        return "-" if value is None else format(value / scale, spec)

    lines = ["gpu  name                      mem used/total GB   util%  mem%  temp  power W      clocks MHz  throttle"]
    for r in rows:
        lines.append(
            f"{r.gpu:>3}  {r.name[:24]:<24}  {fmt(r.memory_used_bytes, 1e9, '.2f'):>7}/"
            f"{fmt(r.memory_total_bytes, 1e9, '.2f'):<8}"
            f"  {fmt(r.utilization_gpu_pct):>5}  {fmt(r.utilization_memory_pct):>4}  {fmt(r.temperature_c):>4}"
            f"  {fmt(r.power_w):>4}/{fmt(r.power_limit_w):<4}  {fmt(r.sm_clock_mhz):>5}/{fmt(r.memory_clock_mhz):<5}"
            f"  {r.throttle_reasons or '-'}"
        )
    for p in procs:
        lines.append(f"     pid {p.pid:<8} {p.name[:30]:<30} {fmt(p.used_memory_bytes, 1e9, '.2f')} GB on GPU {p.gpu}")
    return "\n".join(lines)


class Monitor:
    def __init__(
        self,
        source,
        out: Path,
        interval: float = 1.0,
        exporter: Exporter | None = None,
        alert_mem_pct: float | None = None,
        max_csv_bytes: int = 50 * 2**20,
        log=print,
        command: str = "monitor",
    ):
        self.source, self.out, self.interval, self.exporter, self.log = source, Path(out), interval, exporter, log
        self.folder = output_folder(self.out, command)
        self.folder.check(NAMES)  # before the first sample: a user's file of one of its names, a link, a read-only disk
        for stale in self.folder.remove_stale_temps(NAMES):
            log(f"[monitor] removed {stale} (left by an interrupted monitor)")
        self.gpu_csv = CsvLog(self.folder, "gpu.csv", GPU_COLUMNS, max_csv_bytes, KEEP)
        self.proc_csv = CsvLog(self.folder, "gpu-processes.csv", PROCESS_COLUMNS, max_csv_bytes, KEEP)
        self.summary = Summary()
        self.alerts = Alerts(alert_mem_pct, log)
        self.stop_event = threading.Event()

    def sample_once(self) -> tuple[list[GPUSample], list[ProcessSample]]:
        gpu_rows, proc_rows = self.source.read()
        self.gpu_csv.write(gpu_rows)
        self.proc_csv.write(proc_rows)
        self.summary.add(gpu_rows, proc_rows)
        self.alerts.check(gpu_rows)
        if self.exporter is not None:
            self.exporter.update(gpu_rows, proc_rows)
        return gpu_rows, proc_rows

    def run(self, max_samples: int | None = None) -> None:
        taken = 0
        next_at = time.monotonic()
        while not self.stop_event.is_set() and (max_samples is None or taken < max_samples):
            try:
                self.sample_once()
            except Exception as exc:  # one bad sample must not end the monitor
                self.log(f"[monitor] sample failed: {type(exc).__name__}: {exc}; continuing")
            taken += 1
            next_at += self.interval
            self.stop_event.wait(max(0.0, next_at - time.monotonic()))

    def finish(self) -> dict:
        summary = self.summary.as_dict()
        with self.folder.write([SUMMARY]) as (temp,):
            temp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        csv_path = self.out / "gpu.csv"
        if csv_path.exists():
            samples = read_gpu_csv(csv_path)
            with self.folder.write([PLOT]) as (temp,):
                plots.gpu_memory(samples, temp)
        return summary


def plot_csv(csv_path: Path, plot_out: Path | None = None) -> int:
    """`verl-p40 monitor --plot gpu.csv [--plot-out PNG]`: the figure of a recorded CSV, no GPU asked."""
    target = plot_out or csv_path.with_name(PLOT)
    folder = output_folder(target.parent, flag="--plot-out")
    folder.check([target.name])  # a user's picture of that name, or a link: refused before the CSV is read
    try:
        samples = read_gpu_csv(csv_path)
    except OSError as exc:
        raise UserError(f"{csv_path}: cannot read it ({exc.strerror or exc})") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{csv_path}: not a gpu.csv written by verl-p40 monitor ({type(exc).__name__}: {exc})"
        ) from None
    if not samples:
        raise UserError(f"{csv_path}: not a gpu.csv written by verl-p40 monitor (no samples)")
    with folder.write([target.name]) as (temp,):
        plots.gpu_memory(samples, temp)
    print(f"wrote {target}")
    return 0


def main(options: MonitorOptions) -> int:
    """`verl-p40 monitor`, with the options the command line built (taken whole, never changed)."""
    if options.plot:
        return plot_csv(Path(options.plot), Path(options.plot_out) if options.plot_out else None)
    log = lambda line: print(line, flush=True)  # noqa: E731
    out = Path(options.out)
    output_folder(out).check(NAMES)  # before NVML is asked: what is in the way is said first, and nothing is written
    source = NvmlSource(options.gpus, log=log)
    if options.once:
        monitor = Monitor(source, out, log=log, alert_mem_pct=options.alert_mem_pct)
        rows, procs = monitor.sample_once()
        print(format_table(rows, procs))
        source.close()
        return 0
    exporter = Exporter(options.port, options.bind) if options.port else None
    monitor = Monitor(
        source, out, options.interval, exporter, options.alert_mem_pct, int(options.max_csv_mb * 2**20), log
    )

    def stop(signum, _frame):
        monitor.stop_event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    where = f", metrics on http://{options.bind}:{options.port}/metrics" if options.port else ""
    log(
        f"[monitor] sampling {', '.join(f'GPU {i} {n}' for i, n in source.names.items())} every {options.interval:g} s "
        f"into {out}{where}"
    )
    try:
        monitor.run(max_samples=options.samples)
    finally:
        summary = monitor.finish()
        source.close()
        if exporter is not None:
            exporter.close()
    for index, g in summary["gpus"].items():
        log(
            f"[monitor] GPU {index}: peak {g['peak_memory_used_gb']:.2f} GB, utilisation mean "
            f"{g['utilization_gpu_mean_pct']}% p95 {g['utilization_gpu_p95_pct']}% over {summary['duration_s']} s"
        )
    log(f"[monitor] wrote {out / 'gpu-summary.json'} and {out / 'gpu.png'}")
    return 0
