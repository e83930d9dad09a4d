"""`verl-p40 monitor`: sample every GPU through NVML, keep a CSV, serve Prometheus metrics, summarise and plot.

Per GPU and interval: memory used/total, utilisation (gpu, memory), temperature, power draw/limit, SM and memory
clocks, throttle reasons, PCIe throughput; per process: pid, name, used memory. Rows go to `DIR/gpu.csv` (header
once, appended across restarts, rotated by size) and processes to `DIR/gpu-processes.csv`; the same values are
Prometheus gauges on `--port`. On SIGTERM/SIGINT it writes `DIR/gpu-summary.json` and `DIR/gpu.png`.
"""

from __future__ import annotations

import csv
import json
import statistics
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from verl_p40.atomic import staged, write_text
from verl_p40.gpu import nvml


@dataclass
class GPUSample:
    ts: float
    gpu: int
    name: str
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    throttle_reasons: str | None = None
    pcie_tx_kbs: float | None = None
    pcie_rx_kbs: float | None = None


@dataclass
class ProcessSample:
    ts: float
    gpu: int
    pid: int
    name: str
    used_memory_bytes: int | None


GPU_COLUMNS = [f.name for f in fields(GPUSample)]
PROCESS_COLUMNS = [f.name for f in fields(ProcessSample)]

# ------------------------------------------------------------------------------------------------ NVML source

_THROTTLE_NAMES = {
    "nvmlClocksThrottleReasonGpuIdle": "idle",
    "nvmlClocksThrottleReasonApplicationsClocksSetting": "app_clocks",
    "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
    "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksThrottleReasonSyncBoost": "sync_boost",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "power_brake",
    "nvmlClocksThrottleReasonDisplayClockSetting": "display_clock",
}


def decode_throttle(mask: int, pynvml) -> str:
    names = [label for attr, label in _THROTTLE_NAMES.items() if mask & getattr(pynvml, attr, 0)]
    return "|".join(names) if names else "none"


class NvmlSource:
    """Reads samples from the driver. A failing field becomes None (reported once); a failing GPU is reported and
    skipped for that sample; a GPU that disappears is reported and dropped."""

    def __init__(self, gpus: list[int] | None = None, log=print):
        self.nvml = nvml()  # raises NoGPU (exit code 3) without a driver
        self.log = log
        count = self.nvml.nvmlDeviceGetCount()
        wanted = gpus if gpus is not None else list(range(count))
        missing = [i for i in wanted if i >= count]
        if missing:
            from verl_p40.gpu import NoGPU

            raise NoGPU(f"GPU index {missing} not present; the driver reports {count}")
        self.handles = {i: self.nvml.nvmlDeviceGetHandleByIndex(i) for i in wanted}
        self.names = {i: self._decode(self.nvml.nvmlDeviceGetName(h)) for i, h in self.handles.items()}
        self._warned: set[tuple[int, str]] = set()

    @staticmethod
    def _decode(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _field(self, gpu: int, label: str, fn):
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            if (gpu, label) not in self._warned:
                self._warned.add((gpu, label))
                self.log(f"[monitor] GPU {gpu}: {label} unavailable ({exc}); recording it as empty")
            return None

    def _process_name(self, pid: int) -> str:
        try:
            return self._decode(self.nvml.nvmlSystemGetProcessName(pid)).rsplit("/", 1)[-1]
        except self.nvml.NVMLError:
            try:
                return Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                return "?"

    def read(self) -> tuple[list[GPUSample], list[ProcessSample]]:
        n = self.nvml
        now = time.time()
        gpu_rows, proc_rows = [], []
        for index, handle in list(self.handles.items()):
            try:
                mem = n.nvmlDeviceGetMemoryInfo(handle)
            except n.NVMLError as exc:
                lost = isinstance(exc, getattr(n, "NVMLError_GpuIsLost", ())) or "lost" in str(exc).lower()
                if lost:
                    self.log(f"[monitor] GPU {index} ({self.names[index]}) disappeared ({exc}); no longer sampled")
                    del self.handles[index]
                else:
                    self.log(f"[monitor] GPU {index}: sample failed ({exc}); continuing")
                continue
            util = self._field(index, "utilization", lambda: n.nvmlDeviceGetUtilizationRates(handle))
            power = self._field(index, "power", lambda: n.nvmlDeviceGetPowerUsage(handle))
            limit = self._field(index, "power limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(handle))
            throttle = self._field(index, "throttle reasons",
                                   lambda: n.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
            gpu_rows.append(GPUSample(
                ts=now, gpu=index, name=self.names[index],
                memory_used_bytes=mem.used, memory_total_bytes=mem.total,
                utilization_gpu_pct=None if util is None else float(util.gpu),
                utilization_memory_pct=None if util is None else float(util.memory),
                temperature_c=self._field(index, "temperature",
                                          lambda: float(n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU))),
                power_w=None if power is None else power / 1000.0,
                power_limit_w=None if limit is None else limit / 1000.0,
                sm_clock_mhz=self._field(index, "SM clock", lambda: float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM))),
                memory_clock_mhz=self._field(index, "memory clock",
                                             lambda: float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM))),
                throttle_reasons=None if throttle is None else decode_throttle(throttle, n),
                pcie_tx_kbs=self._field(index, "PCIe throughput",
                                        lambda: float(n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_TX_BYTES))),
                pcie_rx_kbs=self._field(index, "PCIe throughput",
                                        lambda: float(n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_RX_BYTES))),
            ))
            procs = self._field(index, "processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(handle)) or []
            for proc in procs:
                proc_rows.append(ProcessSample(now, index, int(proc.pid), self._process_name(int(proc.pid)),
                                               getattr(proc, "usedGpuMemory", None)))
        if not self.handles:
            self.log("[monitor] no GPU left to sample")
        return gpu_rows, proc_rows

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


# ------------------------------------------------------------------------------------------------ CSV


class CsvLog:
    """Appends rows under one header; starts a new file when the header differs or the size passes `max_bytes`
    (the old file becomes NAME.1, NAME.2, ... keeping `keep` of them)."""

    def __init__(self, path: Path, columns: list[str], max_bytes: int = 50 * 2**20, keep: int = 3):
        self.path, self.columns, self.max_bytes, self.keep = Path(path), columns, max_bytes, keep
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self._header() != columns:
            self._rotate()

    def _header(self) -> list[str] | None:
        with open(self.path, newline="") as handle:
            return next(csv.reader(handle), None)

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def write(self, rows: Iterable) -> None:
        rows = list(rows)
        if not rows:
            return
        if self.path.exists() and self.path.stat().st_size >= self.max_bytes:
            self._rotate()
        new = not self.path.exists() or self.path.stat().st_size == 0
        with open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(self.columns)
            for row in rows:
                values = asdict(row)
                writer.writerow(["" if values[c] is None else values[c] for c in self.columns])
            handle.flush()


def read_gpu_csv(path: str | Path) -> list[GPUSample]:
    numeric = {f.name for f in fields(GPUSample)} - {"name", "throttle_reasons"}
    out = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            values: dict = {}
            for key, value in row.items():
                if key not in GPU_COLUMNS:
                    continue
                if value == "":
                    values[key] = None
                elif key in numeric:
                    values[key] = int(float(value)) if key in ("gpu", "memory_used_bytes", "memory_total_bytes") else float(value)
                else:
                    values[key] = value
            out.append(GPUSample(**values))
    return out


def read_process_csv(path: str | Path) -> list[ProcessSample]:
    with open(path, newline="") as handle:
        return [ProcessSample(ts=float(row["ts"]), gpu=int(row["gpu"]), pid=int(row["pid"]), name=row["name"],
                              used_memory_bytes=int(row["used_memory_bytes"]) if row["used_memory_bytes"] else None)
                for row in csv.DictReader(handle)]


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
            g = self.gpus.setdefault(row.gpu, {"name": row.name, "peak_memory_used_bytes": 0,
                                               "memory_total_bytes": row.memory_total_bytes, "peak_at": None})
            if row.memory_used_bytes is not None and row.memory_used_bytes > g["peak_memory_used_bytes"]:
                g["peak_memory_used_bytes"], g["peak_at"] = row.memory_used_bytes, row.ts
            if row.utilization_gpu_pct is not None:
                self._util.setdefault(row.gpu, []).append(row.utilization_gpu_pct)
        for proc in proc_rows:
            key = f"{proc.gpu}:{proc.pid}"
            p = self.processes.setdefault(key, {"gpu": proc.gpu, "pid": proc.pid, "name": proc.name,
                                                "peak_used_memory_bytes": 0})
            if proc.used_memory_bytes is not None:
                p["peak_used_memory_bytes"] = max(p["peak_used_memory_bytes"], proc.used_memory_bytes)

    def as_dict(self) -> dict:
        gpus = {}
        for index, g in sorted(self.gpus.items()):
            util = self._util.get(index, [])
            gpus[str(index)] = {**g, "peak_memory_used_gb": round(g["peak_memory_used_bytes"] / 1e9, 3),
                                "utilization_gpu_mean_pct": round(sum(util) / len(util), 2) if util else None,
                                "utilization_gpu_p95_pct": _p95(util)}
        return {
            "duration_s": round((self.ended or 0) - (self.started or 0), 1),
            "started": self.started, "ended": self.ended, "samples": self.samples, "gpus": gpus,
            "processes": sorted(self.processes.values(), key=lambda p: -p["peak_used_memory_bytes"]),
        }


# ------------------------------------------------------------------------------------------------ plot


def plot(samples: list[GPUSample], out: Path, title: str = "GPU memory and utilisation") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged([out]) as (temp,):
        fig.savefig(temp, format="png", dpi=110)
    plt.close(fig)
    return out


# ------------------------------------------------------------------------------------------------ Prometheus


class Exporter:
    """Prometheus gauges mirroring the CSV columns, served by prometheus_client on `bind:port`."""

    def __init__(self, port: int | None, bind: str = "127.0.0.1"):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.registry = CollectorRegistry()
        labels = ["gpu", "name"]
        self.gauges = {
            c: Gauge(f"verl_p40_gpu_{c}", f"GPU {c.replace('_', ' ')} (NVML)", labels, registry=self.registry)
            for c in GPU_COLUMNS if c not in ("ts", "gpu", "name", "throttle_reasons")
        }
        self.throttled = Gauge("verl_p40_gpu_throttled", "1 when clocks are throttled for a reason other than idle",
                               labels, registry=self.registry)
        self.process_memory = Gauge("verl_p40_gpu_process_used_memory_bytes", "GPU memory used by a process",
                                    ["gpu", "pid", "name"], registry=self.registry)
        self.server = None
        if port is not None:
            try:
                self.server, _thread = start_http_server(port, addr=bind, registry=self.registry)
            except OSError as exc:
                from verl_p40 import UserError

                raise UserError(f"--port {port}: cannot serve metrics on {bind}:{port} ({exc.strerror or exc}); "
                                "choose another port (MONITOR_PORT in .env)") from None

    def update(self, gpu_rows: list[GPUSample], proc_rows: list[ProcessSample]) -> None:
        for row in gpu_rows:
            labels = (str(row.gpu), row.name)
            for column, gauge in self.gauges.items():
                value = getattr(row, column)
                if value is not None:
                    gauge.labels(*labels).set(value)
            if row.throttle_reasons is not None:
                active = set(row.throttle_reasons.split("|")) - {"none", "idle"}
                self.throttled.labels(*labels).set(1 if active else 0)
        self.process_memory.clear()
        for proc in proc_rows:
            if proc.used_memory_bytes is not None:
                self.process_memory.labels(str(proc.gpu), str(proc.pid), proc.name).set(proc.used_memory_bytes)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


# ------------------------------------------------------------------------------------------------ loop


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
                lines.append(f"WARNING: GPU {row.gpu} ({row.name}) memory at {pct:.1f}% "
                             f"({row.memory_used_bytes / 1e9:.2f} of {row.memory_total_bytes / 1e9:.2f} GB), "
                             f"over the {self.threshold:g}% alert threshold: an out-of-memory kill may follow")
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
            f"{r.gpu:>3}  {r.name[:24]:<24}  {fmt(r.memory_used_bytes, 1e9, '.2f'):>7}/{fmt(r.memory_total_bytes, 1e9, '.2f'):<8}"
            f"  {fmt(r.utilization_gpu_pct):>5}  {fmt(r.utilization_memory_pct):>4}  {fmt(r.temperature_c):>4}"
            f"  {fmt(r.power_w):>4}/{fmt(r.power_limit_w):<4}  {fmt(r.sm_clock_mhz):>5}/{fmt(r.memory_clock_mhz):<5}"
            f"  {r.throttle_reasons or '-'}"
        )
    for p in procs:
        lines.append(f"     pid {p.pid:<8} {p.name[:30]:<30} {fmt(p.used_memory_bytes, 1e9, '.2f')} GB on GPU {p.gpu}")
    return "\n".join(lines)


class Monitor:
    def __init__(self, source, out: Path, interval: float = 1.0, exporter: Exporter | None = None,
                 alert_mem_pct: float | None = None, max_csv_bytes: int = 50 * 2**20, log=print):
        self.source, self.out, self.interval, self.exporter, self.log = source, Path(out), interval, exporter, log
        self.gpu_csv = CsvLog(self.out / "gpu.csv", GPU_COLUMNS, max_csv_bytes)
        self.proc_csv = CsvLog(self.out / "gpu-processes.csv", PROCESS_COLUMNS, max_csv_bytes)
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
        write_text(self.out / "gpu-summary.json", json.dumps(summary, indent=2) + "\n")
        csv_path = self.out / "gpu.csv"
        if csv_path.exists():
            plot(read_gpu_csv(csv_path), self.out / "gpu.png")
        return summary


def parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        from verl_p40 import UserError

        raise UserError(f"--gpus {text!r}: expected a comma list of GPU indices, e.g. 0,1") from None


def main(args) -> int:
    """CLI body of `verl-p40 monitor` (argparse namespace from verl_p40.cli)."""
    log = lambda line: print(line, flush=True)  # noqa: E731
    if args.plot:
        from verl_p40 import UserError

        csv_path = Path(args.plot)
        target = Path(args.plot_out) if args.plot_out else csv_path.with_name("gpu.png")
        try:
            samples = read_gpu_csv(csv_path)
        except OSError as exc:
            raise UserError(f"{csv_path}: cannot read it ({exc.strerror or exc})") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{csv_path}: not a gpu.csv written by verl-p40 monitor ({type(exc).__name__}: {exc})") from None
        if not samples:
            raise UserError(f"{csv_path}: not a gpu.csv written by verl-p40 monitor (no samples)")
        plot(samples, target)
        print(f"wrote {target}")
        return 0
    source = NvmlSource(parse_gpus(args.gpus), log=log)
    out = Path(args.out)
    if args.once:
        monitor = Monitor(source, out, log=log, alert_mem_pct=args.alert_mem_pct)
        rows, procs = monitor.sample_once()
        print(format_table(rows, procs))
        source.close()
        return 0
    exporter = Exporter(args.port, args.bind) if args.port else None
    monitor = Monitor(source, out, args.interval, exporter, args.alert_mem_pct, int(args.max_csv_mb * 2**20), log)

    def stop(signum, _frame):
        monitor.stop_event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    where = f", metrics on http://{args.bind}:{args.port}/metrics" if args.port else ""
    log(f"[monitor] sampling {', '.join(f'GPU {i} {n}' for i, n in source.names.items())} every {args.interval:g} s "
        f"into {out}{where}")
    try:
        monitor.run(max_samples=args.samples)
    finally:
        summary = monitor.finish()
        source.close()
        if exporter is not None:
            exporter.close()
    for index, g in summary["gpus"].items():
        log(f"[monitor] GPU {index}: peak {g['peak_memory_used_gb']:.2f} GB, utilisation mean "
            f"{g['utilization_gpu_mean_pct']}% p95 {g['utilization_gpu_p95_pct']}% over {summary['duration_s']} s")
    log(f"[monitor] wrote {out / 'gpu-summary.json'} and {out / 'gpu.png'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(None))
