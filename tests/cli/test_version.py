"""`verl-p40 --version`: the verl release it runs beside the one installed here, so that a machine without verl (or
with another release) is not read as running it."""

from __future__ import annotations

import os

from conftest import cli


def _path(*folders) -> dict:
    return {"PYTHONPATH": ":".join([*(str(f) for f in folders), os.environ.get("PYTHONPATH", "")])}


def test_version_says_when_verl_is_not_installed(tmp_path):
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["verl"] = None\n')  # as where it never was
    result = cli("--version", env=_path(tmp_path))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == "verl-p40 0.1.0 (runs verl 0.5.0; verl not installed: pip install --no-deps verl==0.5.0)\n"


def test_version_names_another_installed_verl(tmp_path):
    package = tmp_path / "verl"
    (package / "version").mkdir(parents=True)
    (package / "workers").mkdir()
    (package / "__init__.py").write_text("raise ImportError('--version must not import verl')\n")
    (package / "version" / "version").write_text("0.4.1\n")
    result = cli("--version", env=_path(tmp_path))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == "verl-p40 0.1.0 (runs verl 0.5.0; verl 0.4.1 installed)\n"
