"""GPU bench for `verl-p40 monitor`: a real NVML run beside a torch load, and the monitor's CPU overhead.

    python bench/experiments/monitor_run.py --out $OUT --seconds 60

Starts `verl-p40 monitor --interval 1 --port 9400` as a separate process, runs a torch matmul loop on GPU 0 that
holds a known amount of memory, stops the monitor with SIGTERM (as `docker compose stop` does) and checks that
its gpu-summary.json peak agrees with what torch and NVML reported for the load. The monitor's own CPU time over
the run (from /proc) gives its overhead at a 1 s interval. Writes monitor-run-<date>.json beside gpu.csv,
gpu-summary.json and gpu.png.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--hold-gb", type=float, default=20)
    args = parser.parse_args()
    import torch

    out = Path(args.out)
    monitor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "verl_p40.cli",
            "monitor",
            "--interval",
            "1",
            "--port",
            "9400",
            "--out",
            str(out),
            "--alert-mem-pct",
            "10",
        ]
    )
    time.sleep(3)
    cpu_start, wall_start = cpu_seconds(monitor.pid), time.time()
    hold = torch.empty(int(args.hold_gb * 1e9 / 4), dtype=torch.float32, device="cuda")
    a = torch.randn(8192, 8192, device="cuda")
    deadline = time.time() + args.seconds
    while time.time() < deadline:
        for _ in range(20):
            a = torch.tanh(a @ a * 1e-4)
        torch.cuda.synchronize()
    scrape = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=5).read().decode()
    torch_peak = torch.cuda.max_memory_reserved()
    cpu_used, wall = cpu_seconds(monitor.pid) - cpu_start, time.time() - wall_start
    del hold, a
    monitor.send_signal(signal.SIGTERM)
    monitor.wait(timeout=60)
    summary = json.loads((out / "gpu-summary.json").read_text())
    peak = summary["gpus"]["0"]["peak_memory_used_bytes"]
    result = {
        "command": " ".join([sys.executable, *sys.argv]),
        "gpu": torch.cuda.get_device_name(0),
        "load": f"torch fp32 8192x8192 matmul loop plus a {args.hold_gb:g} GB tensor, {args.seconds:g} s",
        "torch_max_memory_reserved_bytes": torch_peak,
        "monitor_peak_memory_used_bytes": peak,
        "monitor_minus_torch_gb": round((peak - torch_peak) / 1e9, 3),
        "monitor_cpu_seconds": round(cpu_used, 3),
        "wall_seconds": round(wall, 1),
        "monitor_cpu_pct_of_one_core": round(100 * cpu_used / wall, 3),
        "metrics_lines": [line for line in scrape.splitlines() if line.startswith("verl_p40_gpu_memory_used_bytes")],
        "monitor_returncode": monitor.returncode,
    }
    (out / f"monitor-run-{time.strftime('%Y-%m-%d')}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
