"""`verl-p40 cluster` on a CPU: a head and a second Ray host on this machine (as the two-node GPU run did), the
head waiting for it, and the doctor's cluster check of what every host sees.

Ray's own `ray stop` (the head's, at its end) ends every process of this machine whose command line names one of
Ray's programs (monitor.py among them): do not name tests/unit_gpu/test_monitor.py on the same pytest command line,
or run another Ray beside these tests."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ONE_RAY, cli
from verl_p40.run.cluster import ray_command

pytestmark = ONE_RAY  # a head and a joined host, stopped with `ray stop --force` (conftest.ONE_RAY)


def _free_base() -> int:
    """A port with the 102 after it free (Ray's ports on one host), for two hosts 200 apart."""
    for base in range(21000, 40000, 500):
        try:
            for port in (base, base + 1, base + 2, base + 200, base + 201, base + 202):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def _start(*args: str) -> subprocess.Popen:
    # with no `ray` script on PATH, as where Ray came with `pip --target` (the GPU machine's first attempt failed so)
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(d, "ray"))
    )
    return subprocess.Popen(
        [sys.executable, "-m", "verl_p40.cli", "cluster", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PATH": path, "RAY_USAGE_STATS_ENABLED": "0"},
    )


def _wait_line(proc: subprocess.Popen, text: str, timeout: float = 120) -> list[str]:
    seen, started = [], time.time()
    while time.time() - started < timeout:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line.rstrip())
        if text in line:
            return seen
    raise AssertionError(f"{text!r} not seen: {seen[-20:]}")


@pytest.fixture(scope="module")
def two_hosts():
    base = _free_base()
    head = _start(
        "head", "--nodes", "2", "--no-train", "--port", str(base), "--node-ip", "127.0.0.1", "--wait-s", "120"
    )
    joined = None
    try:
        _wait_line(head, "cluster: 1 of 2 hosts, 1 of 2 GPUs")  # no GPU here: each host lends the profile's one
        joined = _start("join", "--address", f"127.0.0.1:{base}", "--port", str(base + 200), "--node-ip", "127.0.0.1")
        lines = _wait_line(head, "cluster ready at")
        yield {"address": f"127.0.0.1:{base}", "head_lines": lines}
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
        if joined:
            joined.terminate()
            joined.wait(timeout=60)
        subprocess.run([*ray_command(), "stop", "--force"], capture_output=True)


def test_the_head_waits_for_every_host(two_hosts):
    assert any("cluster: 2 of 2 hosts, 2 of 2 GPUs" in line for line in two_hosts["head_lines"])


def test_the_doctor_sees_what_every_host_sees(two_hosts, tiny_model, prepared, tmp_path):
    env = {"RAY_ADDRESS": two_hosts["address"]}
    common = ["doctor", "--only", "cluster", "--profile", "p40", "--nodes", "2", "--checkpoints", str(tmp_path / "c")]
    ok = cli(*common, "--model", str(tiny_model), "--data", str(prepared), env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS  cluster     2 hosts at 127.0.0.1:" in ok.stdout
    assert not list((tmp_path / "c").glob(".verl-p40-shared-*"))  # its marker is gone
    missing = cli(*common, "--model", str(tmp_path / "no-model"), "--data", str(prepared), env=env)
    assert missing.returncode == 2
    line = next(x for x in missing.stdout.splitlines() if x.startswith("FAIL  cluster"))
    assert f"model {tmp_path / 'no-model'} not found" in line and "fix: every host needs the model" in line


def test_without_a_cluster_the_check_says_what_to_do(tmp_path):
    one = cli("doctor", "--only", "cluster", "--profile", "p40")
    assert "SKIP  cluster     one host" in one.stdout
    two = cli("doctor", "--only", "cluster", "--profile", "p40", "--nodes", "2", env={"RAY_ADDRESS": ""})
    assert two.returncode == 2 and "FAIL  cluster     --nodes 2 but RAY_ADDRESS is not set" in two.stdout


def test_join_needs_the_heads_address():
    result = cli("cluster", "join", env={"RAY_HEAD": ""})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("verl-p40 cluster: error: --address HEAD:PORT")


def test_join_refuses_an_address_that_is_not_host_and_port():
    for address in ("10.0.0.1:notaport", "10.0.0.1", ":6379", "10.0.0.1:70000"):
        result = cli("cluster", "join", "--address", address)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert lines == [
            f"verl-p40 cluster: error: --address {address} (RAY_HEAD): not HEAD:PORT; give the head's address and "
            "its RAY_PORT, e.g. 10.0.0.1:6379"
        ], lines
        assert "$ " not in result.stdout  # no `ray start` was printed, nor run


def test_without_ray_both_ends_say_so_in_one_line_before_any_ray_start(tmp_path):
    """`ray start` is Ray's own program: without Ray it would end in a traceback of the child (join execs it)."""
    absent = tmp_path / "no-ray"  # None in sys.modules: Ray is not found, as where it was never installed
    absent.mkdir()
    (absent / "sitecustomize.py").write_text('import sys\nsys.modules["ray"] = None\n')
    env = {"PYTHONPATH": f"{absent}:{os.environ.get('PYTHONPATH', '')}", "RAY_ADDRESS": ""}
    for args in (["join", "--address", "10.0.0.1:6379"], ["head", "--profile", "p40", "--model", str(tmp_path)]):
        result = cli("cluster", *args, env=env)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert lines == [
            "verl-p40 cluster: error: this command needs the Python package 'ray', which is not installed here: run it "
            "in the image (docker compose), or pip install ray (docs/image.md, the pip package)"
        ], lines
        assert "$ " not in result.stdout  # no `ray start` was printed, nor run


def test_a_bad_environment_value_does_not_break_help():
    """Environment values are checked when the command that reads them is parsed, not while the parser is built."""
    for env in ({"RAY_PORT": "abc"}, {"VERL_P40_CLUSTER_WAIT_S": "soon"}):
        result = cli("--help", env=env)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert cli("cluster", "--help", env=env).returncode == 0
