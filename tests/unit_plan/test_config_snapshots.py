"""`verl-p40 config` for four cards, one and four GPUs, the default recipe and verl's ppo: the whole output (notes on
stderr, the composed YAML on stdout) held to the files in config_snapshots/, committed before the planner's
refactoring (issue 61) so that "behaviour unchanged" is a test, not a claim.

The machine is taken out of it: `--card` gives the GPU, the data folder is not there (the epochs line says so), vLLM
and Triton count as not installed, paths are normalised. After a deliberate change of the plan's output, rewrite the
files with `python tests/unit_plan/test_config_snapshots.py` and commit them with the change that explains them.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "config_snapshots"
CARDS = ("p40", "v100", "a100-40gb", "h200")
GPUS = {"1gpu": "0", "4gpu": "0,1,2,3"}
ALGORITHMS = {"default": (), "ppo": ("--algorithm", "ppo")}
CASES = [(card, g, a) for card in CARDS for g in GPUS for a in ALGORITHMS]


def _name(card: str, gpus: str, algorithm: str) -> str:
    return f"{card}-{gpus}-{algorithm}.txt"


def render(card: str, gpus: str, algorithm: str, cwd: Path) -> str:
    """What `verl-p40 config` prints for the case, run in `cwd` with no VERL_P40_* variable set, normalised."""
    import verl_p40
    from verl_p40 import cli
    from verl_p40.plan import engines

    args = ["config", "--card", card, "--gpus", GPUS[gpus], "--data", str(cwd / "no-data"), *ALGORITHMS[algorithm]]
    saved_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("VERL_P40_")}
    saved_cwd, saved_installed = os.getcwd(), engines.installed
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(cwd)
        engines.installed = lambda module: False  # vLLM and Triton: as on a host without them
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(args)
    finally:
        engines.installed = saved_installed
        os.chdir(saved_cwd)
        os.environ.update(saved_env)
    text = f"$ verl-p40 {' '.join(args)}\nexit {code}\n--- stderr\n{err.getvalue()}--- stdout\n{out.getvalue()}"
    return text.replace(str(cwd), "<cwd>").replace(str(Path(verl_p40.__file__).parent), "<verl_p40>")


@pytest.mark.parametrize(("card", "gpus", "algorithm"), CASES)
def test_config_output_is_unchanged(card, gpus, algorithm, tmp_path):
    expected = (HERE / _name(card, gpus, algorithm)).read_text()
    assert render(card, gpus, algorithm, tmp_path) == expected


def test_every_case_has_its_file_and_no_file_is_left_over():
    assert sorted(p.name for p in HERE.glob("*.txt")) == sorted(_name(*case) for case in CASES)


if __name__ == "__main__":  # rewrite the expected outputs after a deliberate change
    import tempfile

    HERE.mkdir(exist_ok=True)
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            (HERE / _name(*case)).write_text(render(*case, Path(tmp).resolve()))
    print(f"wrote {len(CASES)} files in {HERE}", file=sys.stderr)
