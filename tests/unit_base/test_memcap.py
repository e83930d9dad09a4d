import pytest

from verl_p40.memcap import fraction_for


def test_fraction_of_device_memory():
    assert fraction_for(24, 150_110_000_000) == pytest.approx(24e9 / 150.11e9)
    assert fraction_for(200, 24_000_000_000) == 1.0


def test_the_workers_cap_is_named_apart_from_the_users(monkeypatch):
    """The user's $VERL_P40_GPU_MEMORY_CAP_GB is --gpu-memory-cap-gb, read and checked once by the CLI; the workers
    apply only the cap the plan hands them under their own name, so the user's variable reaching a worker (compose
    sets it for the trainer container) caps nothing there, and the trainer drops only the workers' names."""
    import torch

    from verl_p40 import defaults, memcap
    from verl_p40.run.trainer import worker_free

    assert memcap.ENV == defaults.WORKER_MEMORY_CAP_ENV != defaults.GPU_MEMORY_CAP_ENV
    assert defaults.is_worker_setting(memcap.ENV) and not defaults.is_worker_setting(defaults.GPU_MEMORY_CAP_ENV)
    assert worker_free({defaults.GPU_MEMORY_CAP_ENV: "24", memcap.ENV: "80"}) == {defaults.GPU_MEMORY_CAP_ENV: "24"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: pytest.fail("capped"))
    monkeypatch.delenv(memcap.ENV, raising=False)
    monkeypatch.setenv(defaults.GPU_MEMORY_CAP_ENV, "24")
    assert memcap.apply() is None


def test_apply_sets_the_fraction_on_the_current_device(monkeypatch, capsys):
    """What every Ray worker does when it imports verl_p40.worker_hooks (actor_rollout_ref.model.external_lib)."""
    import types

    import torch

    from verl_p40 import memcap

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=48_000_000_000)
    )
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d)))
    monkeypatch.setenv(memcap.ENV, "24")
    assert memcap.apply() == pytest.approx(0.5)
    assert calls == [(pytest.approx(0.5), 1)]
    assert "GPU memory capped at 24 GB (0.5000 of cuda:1)" in capsys.readouterr().out
    monkeypatch.delenv(memcap.ENV)
    assert memcap.apply() is None and len(calls) == 1  # no cap asked: nothing set
    monkeypatch.setenv(memcap.ENV, "24")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert memcap.apply() is None and len(calls) == 1  # no GPU: nothing to cap


def test_the_cli_process_never_applies_the_cap(tmp_path):
    """compose sets VERL_P40_GPU_MEMORY_CAP_GB for the trainer container: the CLI must hand it to verl's workers and
    not import verl_p40.worker_hooks itself (that would make a CUDA context in the driver process)."""
    import subprocess
    import sys

    code = (
        "import sys; from verl_p40 import cli; cli.build_parser(); "
        "import verl_p40.plan.planner, verl_p40.doctor.runner; "
        "print('verl_p40.worker_hooks' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "VERL_P40_GPU_MEMORY_CAP_GB": "24"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_importing_the_cap_applies_nothing_the_worker_hooks_apply_it(monkeypatch):
    """verl's workers import verl_p40.worker_hooks (defaults.WORKER_HOOKS_MODULE), which applies the cap, TF32 and
    cuDNN attention; verl_p40.memcap alone only holds the cap's rule, so importing it sets nothing."""
    import subprocess
    import sys

    from verl_p40 import defaults

    assert defaults.WORKER_HOOKS_MODULE == "verl_p40.worker_hooks"
    code = "import torch, verl_p40.{}; print(torch.backends.cuda.matmul.allow_tf32)"
    env = {**__import__("os").environ, defaults.TF32_ENV: "1"}
    alone = subprocess.run([sys.executable, "-c", code.format("memcap")], capture_output=True, text=True, env=env)
    assert alone.returncode == 0 and alone.stdout.strip() == "False", alone.stderr
    hooks = subprocess.run([sys.executable, "-c", code.format("worker_hooks")], capture_output=True, text=True, env=env)
    assert hooks.returncode == 0 and hooks.stdout.strip().splitlines()[-1] == "True", hooks.stderr
