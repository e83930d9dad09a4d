"""`verl-p40 monitor --port`: the GPU samples as Prometheus gauges, served by prometheus_client."""

from __future__ import annotations

from verl_p40 import UserError
from verl_p40.gpu.sampler import GPU_COLUMNS, GPUSample, ProcessSample


class Exporter:
    """Prometheus gauges mirroring the CSV columns, served by prometheus_client on `bind:port`."""

    def __init__(self, port: int | None, bind: str = "127.0.0.1"):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.registry = CollectorRegistry()
        labels = ["gpu", "name"]
        self.gauges = {
            c: Gauge(f"verl_p40_gpu_{c}", f"GPU {c.replace('_', ' ')} (NVML)", labels, registry=self.registry)
            for c in GPU_COLUMNS
            if c not in ("ts", "gpu", "name", "throttle_reasons")
        }
        self.throttled = Gauge(
            "verl_p40_gpu_throttled",
            "1 when clocks are throttled for a reason other than idle",
            labels,
            registry=self.registry,
        )
        self.process_memory = Gauge(
            "verl_p40_gpu_process_used_memory_bytes",
            "GPU memory used by a process",
            ["gpu", "pid", "name"],
            registry=self.registry,
        )
        self.server = None
        if port is not None:
            try:
                self.server, _thread = start_http_server(port, addr=bind, registry=self.registry)
            except OSError as exc:
                raise UserError(
                    f"--port {port}: cannot serve metrics on {bind}:{port} ({exc.strerror or exc}); "
                    "choose another port (MONITOR_PORT in .env)"
                ) from None

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
