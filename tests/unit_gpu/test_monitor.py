"""Monitor logic on recorded samples (the NVML reading itself runs on the GPU machine:
bench/experiments/monitor_run.py)."""

import json
import sys
import threading
import urllib.request

import pytest

from conftest import cli
from verl_p40 import UserError
from verl_p40.gpu import csv_log as gpu_csv
from verl_p40.gpu import monitor as m
from verl_p40.gpu import nvml, prometheus
from verl_p40.gpu import sampler as samples


def _gpu(ts, gpu=0, used=10e9, util=50.0, total=24e9, name="Tesla P40", throttle="none"):
    return samples.GPUSample(
        ts=ts,
        gpu=gpu,
        name=name,
        memory_used_bytes=int(used),
        memory_total_bytes=int(total),
        utilization_gpu_pct=util,
        utilization_memory_pct=20.0,
        temperature_c=60.0,
        power_w=150.0,
        power_limit_w=250.0,
        sm_clock_mhz=1531.0,
        memory_clock_mhz=3615.0,
        throttle_reasons=throttle,
        pcie_tx_kbs=None,
        pcie_rx_kbs=1000.0,
    )


class Recorded:
    """Replays recorded samples; the third read fails like a transient NVML error."""

    def __init__(self):
        self.t = 1000.0
        self.reads = 0

    def read(self):
        self.reads += 1
        if self.reads == 3:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        self.t += 1
        used = 8e9 + self.reads * 1e9
        return (
            [_gpu(self.t, used=used, util=10.0 * self.reads), _gpu(self.t, gpu=1, used=2e9, util=0.0, name="GPU B")],
            [samples.ProcessSample(self.t, 0, 4242, "python3", int(used - 5e8))],
        )


def test_loop_writes_csv_summary_and_plot_and_survives_a_bad_sample(tmp_path):
    lines = []
    mon = m.Monitor(Recorded(), tmp_path, interval=0.0, alert_mem_pct=50, log=lines.append)
    mon.run(max_samples=6)
    summary = mon.finish()
    rows = gpu_csv.read_gpu_csv(tmp_path / "gpu.csv")
    assert len(rows) == 10 and {r.gpu for r in rows} == {0, 1}  # 5 good samples x 2 GPUs
    assert (tmp_path / "gpu.csv").read_text().count("memory_used_bytes") == 1
    assert any("sample failed: RuntimeError: NVML_ERROR_UNKNOWN" in line for line in lines)
    assert summary["gpus"]["0"]["peak_memory_used_bytes"] == int(8e9 + 6 * 1e9)
    assert (
        summary["gpus"]["0"]["utilization_gpu_p95_pct"] == 58.0
    )  # interpolated (statistics.quantiles, inclusive): 50 + 0.8 x (60 - 50)
    assert summary["gpus"]["1"]["utilization_gpu_mean_pct"] == 0.0
    assert summary["processes"][0]["pid"] == 4242 and summary["processes"][0]["peak_used_memory_bytes"] == int(13.5e9)
    assert json.loads((tmp_path / "gpu-summary.json").read_text()) == summary
    procs = gpu_csv.read_process_csv(tmp_path / "gpu-processes.csv")  # the CSV gives back the samples written
    assert len(procs) == 5 and max(p.used_memory_bytes for p in procs) == int(13.5e9) and procs[0].pid == 4242
    assert (tmp_path / "gpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sum("WARNING: GPU 0" in line for line in lines) == 1  # crossed 50 % once, reported once


def test_restart_appends_under_one_header_and_rotates_by_size(tmp_path):
    folder = m.output_folder(tmp_path)
    log = gpu_csv.CsvLog(folder, "gpu.csv", samples.GPU_COLUMNS, max_bytes=5_000)
    log.write([_gpu(1.0)])
    log = gpu_csv.CsvLog(folder, "gpu.csv", samples.GPU_COLUMNS, max_bytes=5_000)  # a restarted monitor
    log.write([_gpu(2.0)])
    assert [r.ts for r in gpu_csv.read_gpu_csv(tmp_path / "gpu.csv")] == [1.0, 2.0]
    for i in range(100):
        log.write([_gpu(3.0 + i)])
    assert (tmp_path / "gpu.csv.1").exists() and (tmp_path / "gpu.csv").stat().st_size < 5_000 + 500
    for i in range(200):
        log.write([_gpu(103.0 + i)])
    assert (tmp_path / "gpu.csv.3").exists() and not (tmp_path / "gpu.csv.4").exists()  # three rotated parts kept
    assert folder.owns("gpu.csv.3") and folder.owns("gpu.csv")  # the ledger follows each rotation
    with folder.write(["other.csv"]) as (temp,):  # the monitor's own file, under another header (an older version)
        temp.write_text("a,b\n1,2\n")
    gpu_csv.CsvLog(folder, "other.csv", samples.GPU_COLUMNS).write([_gpu(1.0)])  # rotated away, not mixed in
    assert (tmp_path / "other.csv.1").read_text() == "a,b\n1,2\n"
    assert gpu_csv.header(tmp_path / "other.csv") == samples.GPU_COLUMNS


def test_a_users_csv_of_one_of_its_names_is_never_added_to_nor_rotated(tmp_path):
    (tmp_path / "gpu.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match=r"gpu.csv: already there and not written by verl-p40 monitor; move it away"):
        gpu_csv.CsvLog(m.output_folder(tmp_path), "gpu.csv", samples.GPU_COLUMNS)
    (tmp_path / "rotated").mkdir()
    (tmp_path / "rotated" / "gpu-processes.csv.2").write_text("my notes\n")  # where a rotation would put a part
    with pytest.raises(UserError, match=r"gpu-processes.csv.2: already there and not written by verl-p40 monitor"):
        m.Monitor(Recorded(), tmp_path / "rotated", interval=0.0, log=lambda _: None)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "gpu.csv", "rotated", "rotated/gpu-processes.csv.2"
    ]  # fmt: skip
    assert (tmp_path / "gpu.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("name", ["gpu.csv", "gpu-summary.json", "gpu.png"])
def test_a_link_where_one_of_its_files_goes_is_never_followed(tmp_path, name):
    outside = tmp_path / "outside"
    outside.write_text("keep")
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / name).symlink_to(outside)
    with pytest.raises(UserError, match=f"gpu/{name}: a symbolic link; verl-p40 monitor writes only inside --out"):
        m.Monitor(Recorded(), tmp_path / "gpu", interval=0.0, log=lambda _: None)
    assert outside.read_text() == "keep" and [p.name for p in (tmp_path / "gpu").iterdir()] == [name]


def test_a_second_run_continues_its_csv_and_replaces_its_summary_and_plot(tmp_path):
    for later in (0.0, 100.0):
        source = Recorded()
        source.t += later
        mon = m.Monitor(source, tmp_path, interval=0.0, log=lambda _: None)
        mon.run(max_samples=2)
        summary = mon.finish()
        assert json.loads((tmp_path / "gpu-summary.json").read_text()) == summary  # this run's, not the first's
        assert summary["started"] == 1001.0 + later
    assert len(gpu_csv.read_gpu_csv(tmp_path / "gpu.csv")) == 8  # 2 samples x 2 GPUs x 2 runs, under one header
    assert (tmp_path / "gpu.csv").read_text().count("memory_used_bytes") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".verl-p40-outputs.json", "gpu-processes.csv", "gpu-summary.json", "gpu.csv", "gpu.png"]
    )  # no temporary left


def test_a_row_a_kill_cut_short_is_dropped_and_a_killed_runs_temporary_removed(tmp_path):
    mon = m.Monitor(Recorded(), tmp_path, interval=0.0, log=lambda _: None)
    mon.run(max_samples=1)
    whole = (tmp_path / "gpu.csv").read_bytes()
    with open(tmp_path / "gpu.csv", "ab") as handle:
        handle.write(b"1001.0,0,Tesla P")  # a SIGKILL in the middle of a row
    (tmp_path / ".gpu.png.abc123.tmp").write_bytes(b"half a picture")
    lines = []
    mon = m.Monitor(Recorded(), tmp_path, interval=0.0, log=lines.append)
    assert lines == [f"[monitor] removed {tmp_path / '.gpu.png.abc123.tmp'} (left by an interrupted monitor)"]
    mon.run(max_samples=1)
    assert (tmp_path / "gpu.csv").read_bytes().startswith(whole)
    assert len(gpu_csv.read_gpu_csv(tmp_path / "gpu.csv")) == 4  # both rows whole, the cut one gone


def test_a_full_disk_loses_a_batch_of_rows_whole_and_the_monitor_goes_on(tmp_path, monkeypatch):
    import os

    lines = []
    mon = m.Monitor(Recorded(), tmp_path, interval=0.0, log=lines.append)
    mon.run(max_samples=1)
    before = (tmp_path / "gpu.csv").read_bytes()
    real_write = os.write

    def full(fd, data):
        real_write(fd, bytes(data[:10]))
        raise OSError(28, os.strerror(28))

    monkeypatch.setattr(os, "write", full)
    mon.run(max_samples=1)
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / "gpu.csv").read_bytes() == before
    failed = [line for line in lines if "sample failed: UserError: --out" in line]
    assert len(failed) == 1 and "cannot write gpu.csv (No space left on device)" in failed[0]


def test_what_an_earlier_version_wrote_is_continued_and_replaced(tmp_path):
    """A folder a monitor wrote before the ledger (an upgraded stack's /logs/gpu): its files are the monitor's."""
    log = gpu_csv.CsvLog(m.output_folder(tmp_path), "gpu.csv", samples.GPU_COLUMNS)
    log.write([_gpu(1.0)])
    (tmp_path / "gpu-summary.json").write_text(json.dumps(m.Summary().as_dict()))
    (tmp_path / "gpu.png").write_bytes(b"\x89PNG\r\n\x1a\n an old picture")
    (tmp_path / ".verl-p40-outputs.json").unlink()
    mon = m.Monitor(Recorded(), tmp_path, interval=0.0, log=lambda _: None)
    mon.run(max_samples=1)
    mon.finish()
    assert [r.ts for r in gpu_csv.read_gpu_csv(tmp_path / "gpu.csv")] == [1.0, 1001.0, 1001.0]
    assert json.loads((tmp_path / "gpu-summary.json").read_text())["samples"] == 2
    assert (tmp_path / "gpu.png").stat().st_size > 1000
    (tmp_path / ".verl-p40-outputs.json").unlink()
    (tmp_path / "gpu-summary.json").write_text('{"my": "notes"}')  # a PNG beside a summary not the monitor's...
    with pytest.raises(UserError, match="gpu-summary.json: already there and not written by verl-p40 monitor"):
        m.Monitor(Recorded(), tmp_path, interval=0.0, log=lambda _: None)
    assert not m.earlier_output("gpu.png", tmp_path / "gpu.png")  # ...is not taken for the monitor's either


def test_summary_and_plot_from_csv_via_cli(tmp_path):
    log = gpu_csv.CsvLog(m.output_folder(tmp_path), "gpu.csv", samples.GPU_COLUMNS)
    log.write([_gpu(float(t), used=1e9 * t, util=float(t)) for t in range(1, 21)])
    result = cli("monitor", "--plot", str(tmp_path / "gpu.csv"), "--plot-out", str(tmp_path / "again.png"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "again.png").stat().st_size > 1000
    result = cli("monitor", "--plot", str(tmp_path / "gpu.csv"), "--plot-out", str(tmp_path / "again.png"))
    assert result.returncode == 0, result.stderr  # its own picture: drawn again
    (tmp_path / "mine.png").write_bytes(b"a user's picture")
    result = cli("monitor", "--plot", str(tmp_path / "gpu.csv"), "--plot-out", str(tmp_path / "mine.png"))
    assert result.returncode == 2 and (tmp_path / "mine.png").read_bytes() == b"a user's picture"
    assert (
        "mine.png: already there and not written by verl-p40 monitor; move it away (or remove it), or choose "
        "another --plot-out" in result.stderr
    )
    summary = m.Summary()
    summary.add(gpu_csv.read_gpu_csv(tmp_path / "gpu.csv"), [])
    summary = summary.as_dict()
    assert summary["duration_s"] == 19.0 and summary["gpus"]["0"]["peak_memory_used_gb"] == 20.0
    assert summary["gpus"]["0"]["utilization_gpu_p95_pct"] == 19.05  # 1..20: 19 + 0.05 x (20 - 19)


def test_table_formatting_shows_missing_fields_as_dash():
    row = _gpu(1.0)
    row.pcie_tx_kbs = None
    row.power_w = None
    text = m.format_table([row], [samples.ProcessSample(1.0, 0, 7, "python3", None)])
    assert "Tesla P40" in text and "10.00/24.00" in text and "-/250" in text and "pid 7" in text


def test_alert_rearms_after_dropping_below():
    lines = []
    alerts = m.Alerts(90, log=lines.append)
    for used in (10e9, 22e9, 23e9, 5e9, 22.5e9):
        alerts.check([_gpu(0.0, used=used)])
    assert [line.split(" (")[0] for line in lines] == [
        "WARNING: GPU 0",
        "GPU 0 memory back under 90%",
        "WARNING: GPU 0",
    ]


def test_metrics_endpoint_served_and_scraped_over_loopback():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = prometheus.Exporter(port, "127.0.0.1")
    try:
        exporter.update(
            [_gpu(1.0, used=12.5e9, util=77.0, throttle="sw_power_cap")],
            [samples.ProcessSample(1.0, 0, 99, "python3", int(3e9))],
        )
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        exporter.close()
    assert 'verl_p40_gpu_memory_used_bytes{gpu="0",name="Tesla P40"} 1.25e+010' in body
    assert 'verl_p40_gpu_utilization_gpu_pct{gpu="0",name="Tesla P40"} 77.0' in body
    assert 'verl_p40_gpu_throttled{gpu="0",name="Tesla P40"} 1.0' in body
    assert 'verl_p40_gpu_process_used_memory_bytes{gpu="0",name="python3",pid="99"} 3e+09' in body


@pytest.mark.usefixtures("no_driver")
def test_no_nvml_is_exit_3_with_one_line(tmp_path):
    result = cli("monitor", "--out", str(tmp_path), "--samples", "1")
    assert result.returncode == 3
    assert result.stderr.strip().count("\n") == 0 and "no NVIDIA GPU visible through NVML" in result.stderr
    assert not (tmp_path / "gpu.csv").exists()


def test_stop_event_ends_the_loop_promptly(tmp_path):
    class Quiet:
        def read(self):
            return [_gpu(1.0)], []

    mon = m.Monitor(Quiet(), tmp_path, interval=30.0, log=lambda _: None)
    thread = threading.Thread(target=mon.run)
    thread.start()
    mon.stop_event.set()  # what SIGTERM and Ctrl-C do (cli: the monitor's stop)
    thread.join(timeout=5)
    assert not thread.is_alive()
    summary = mon.finish()  # what main does after the loop, in its finally: the summary and the plot, each whole
    assert json.loads((tmp_path / "gpu-summary.json").read_text()) == json.loads(json.dumps(summary))
    assert (tmp_path / "gpu.png").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".verl-p40-outputs.json",
        "gpu-summary.json",
        "gpu.csv",
        "gpu.png",
    ]


def test_gpu_list_parsing():
    """The monitor's --gpus is typed as training's is (one parser): all, or distinct indices."""
    assert nvml.parse_gpus("0, 2") == (0, 2) and nvml.parse_gpus(" ALL ") is None
    with pytest.raises(UserError, match="use all, or GPU indices"):
        nvml.parse_gpus("first")
    with pytest.raises(UserError, match="distinct GPU indices"):
        nvml.parse_gpus("1,1")


def test_a_port_in_use_is_one_line():
    import socket

    from verl_p40 import UserError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"--port {port}: cannot serve metrics on 127.0.0.1:{port}"):
            prometheus.Exporter(port, "127.0.0.1")


def test_nvml_is_initialised_once_per_process(monkeypatch):
    """Every NVML reader shares one initialisation (gpustat's ensure_initialized); the shutdown waits for the exit."""
    import types

    calls = []
    fake = types.SimpleNamespace(
        NVMLError=RuntimeError,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"Tesla P40",
        nvmlDeviceGetCudaComputeCapability=lambda h: (6, 1),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=24 * 2**30, used=0),
        nvmlSystemGetDriverVersion=lambda: "535.183.01",
        nvmlSystemGetCudaDriverVersion=lambda: 12020,
    )
    exits = []
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_initialized", False)
    monkeypatch.setattr(nvml.atexit, "register", lambda fn, *args: exits.append((fn, args)))
    assert [g.name for g in nvml.detect()] == ["Tesla P40"]
    assert nvml.driver_versions() == ("535.183.01", (12, 2))
    samples.NvmlSource([0]).close()
    assert calls == ["init"] and len(exits) == 1
    fn, args = exits[0]
    fn(*args)
    assert calls == ["init", "shutdown"]


def test_the_alert_threshold_comes_from_the_environment_the_service_sets(monkeypatch):
    """The gpu-monitor service passes .env's MONITOR_ALERT_MEM_PCT as this variable; a flag still wins."""
    from verl_p40.cli import build_parser
    from verl_p40.gpu import options as monitor_options
    from verl_p40.options import resolve

    parser = build_parser()
    monkeypatch.setenv(monitor_options.MONITOR_ALERT_ENV, "")  # compose's empty default: no alert
    assert resolve(monitor_options.MonitorOptions, parser.parse_args(["monitor"])).alert_mem_pct is None
    monkeypatch.setenv(monitor_options.MONITOR_ALERT_ENV, "98")
    assert resolve(monitor_options.MonitorOptions, parser.parse_args(["monitor"])).alert_mem_pct == 98.0
    flagged = parser.parse_args(["monitor", "--alert-mem-pct", "90"])
    assert resolve(monitor_options.MonitorOptions, flagged).alert_mem_pct == 90.0


def _fake_driver(lost_gpu=None):
    """A pynvml stand-in with two GPUs: GPU 1 has no power reading; `lost_gpu` has fallen off the bus."""
    import types

    class NVMLError(Exception):
        pass

    class GpuIsLost(NVMLError):
        pass

    def memory(h):
        if h == lost_gpu:
            raise GpuIsLost("GPU is lost")
        return types.SimpleNamespace(total=24_000, used=1_000 * (h + 1))

    def power(h):
        if h == 1:
            raise NVMLError("Not Supported")
        return 125_000

    return types.SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_GpuIsLost=GpuIsLost,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=0,
        NVML_CLOCK_MEM=1,
        NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1,
        nvmlClocksThrottleReasonSwPowerCap=4,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"Tesla P40",
        nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=40, memory=20),
        nvmlDeviceGetTemperature=lambda h, kind: 61,
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 250_000,
        nvmlDeviceGetClockInfo=lambda h, kind: (1531, 3615)[kind],
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 4,
        nvmlDeviceGetPcieThroughput=lambda h, kind: (10, 20)[kind],
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=4242, usedGpuMemory=500)][: 1 - h],
        nvmlSystemGetProcessName=lambda pid: b"/usr/bin/python3",
    )


def test_the_sampler_reads_every_field_and_empties_the_ones_a_gpu_lacks(monkeypatch):
    """One sample per GPU with each field NVML gives; a field the card lacks is empty and said once, not each time."""
    monkeypatch.setattr(samples, "nvml", lambda: _fake_driver())
    lines = []
    source = samples.NvmlSource(log=lines.append)
    gpus, procs = source.read()
    first = gpus[0]
    assert (first.gpu, first.name, first.memory_used_bytes, first.memory_total_bytes) == (0, "Tesla P40", 1000, 24000)
    assert (first.utilization_gpu_pct, first.utilization_memory_pct, first.temperature_c) == (40.0, 20.0, 61.0)
    assert (first.power_w, first.power_limit_w, first.sm_clock_mhz, first.memory_clock_mhz) == (
        125.0,
        250.0,
        1531.0,
        3615.0,
    )
    assert (first.throttle_reasons, first.pcie_tx_kbs, first.pcie_rx_kbs) == ("sw_power_cap", 10.0, 20.0)
    assert gpus[1].power_w is None and gpus[1].memory_used_bytes == 2000
    assert [(p.gpu, p.pid, p.name, p.used_memory_bytes) for p in procs] == [(0, 4242, "python3", 500)]
    assert lines == ["[monitor] GPU 1: power unavailable (Not Supported); recording it as empty"]
    source.read()
    assert len(lines) == 1  # said once


def test_a_gpu_that_falls_off_the_bus_is_dropped_and_said(monkeypatch):
    monkeypatch.setattr(samples, "nvml", lambda: _fake_driver(lost_gpu=1))
    lines = []
    source = samples.NvmlSource(log=lines.append)
    gpus, _ = source.read()
    assert [g.gpu for g in gpus] == [0] and list(source.handles) == [0]
    assert "[monitor] GPU 1 (Tesla P40) disappeared (GPU is lost); no longer sampled" in lines
