import pytest

from verl_p40.memcap import cap_gb, fraction_for


def test_fraction_of_device_memory():
    assert fraction_for(24, 150_110_000_000) == pytest.approx(24e9 / 150.11e9)
    assert fraction_for(200, 24_000_000_000) == 1.0
    with pytest.raises(ValueError):
        fraction_for(0, 10)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "0.3", "-3", "24GB", ""])
def test_a_worker_refuses_a_cap_the_option_refuses(text):
    """min(1.0, nan) is 1.0: a NaN cap would have applied no cap without a word; the worker names the variable. The
    rule is the option's own (defaults.GPU_MEMORY_CAP_MIN_GB): 0.3 is refused by both, not by one of them only."""
    with pytest.raises(ValueError, match=r"^\$VERL_P40_GPU_MEMORY_CAP_GB: .*; give the cap in GB"):
        cap_gb(text)
    with pytest.raises(ValueError):
        fraction_for(text, 24_000_000_000)


def test_apply_sets_the_fraction_on_the_current_device(monkeypatch, capsys):
    """What every Ray worker does at import (actor_rollout_ref.model.external_lib=verl_p40.memcap)."""
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
    not import verl_p40.memcap itself (that would make a CUDA context in the driver process)."""
    import subprocess
    import sys

    code = (
        "import sys; from verl_p40 import cli; cli.build_parser(); "
        "import verl_p40.plan.planner, verl_p40.doctor.runner; "
        "print('verl_p40.memcap' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "VERL_P40_GPU_MEMORY_CAP_GB": "24"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
