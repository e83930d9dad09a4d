"""One reader of a run's folder (patches/p40_run_folder.py, issue 70): the validation metric's key has one home, and
a damaged run record in verl's trainer process is said in one line, kept aside and never rewritten from empty, in
the package's copy and in the copy the patch set installs into verl alike."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app" / "verl_p40"
KEY = "val-core/openai/gsm8k/acc/mean@1"


def _strings(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_the_validation_metric_key_is_spelled_once():
    """verl's validation accuracy (`val-core/<data source>/acc/mean@1`) is named in one module; the trainer's watch,
    eval's curves and the trainer's record take it from there."""
    spelled = [
        str(path.relative_to(APP))
        for path in sorted(APP.rglob("*.py"))
        for text in _strings(path)
        if "val-core" in text or "acc/mean@" in text
    ]
    assert spelled == ["patches/p40_run_folder.py"], spelled


def test_bench_reads_the_validation_accuracy_through_the_product():
    """bench's reports and runs take a step's validation accuracy from p40_run_folder.accuracy_of, not by the first
    `val-core/` key they meet (a log with two parts, `acc` and `reward`, gave two points a step, or either one);
    bench/experiments keep their own (each a record of what ran then)."""
    bench = REPO / "bench"
    spelled = [
        str(path.relative_to(bench))
        for path in sorted(bench.rglob("*.py"))
        if not {"experiments", "results"} & set(path.relative_to(bench).parts)
        for text in _strings(path)
        if "val-core" in text
    ]
    assert spelled == [], spelled


DAMAGED = {
    "cut-short": b'{"algorithm": "ppo", "lora": null, "validations": {"0": 0.2, "1": 0.5',
    "a-list": b"[1, 2]",
    "not-utf8": b'{"algorithm": "\xff"}',
    "empty": b"",
    "accuracy-null": json.dumps({"algorithm": "ppo", "validations": {"0": 0.2, "1": None}}).encode(),
}

_PROBE = r"""
import contextlib, io, json, os, sys
{import_line}

out = {{}}
for case, path in json.loads(sys.argv[1]).items():
    root = os.path.dirname(path)
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        os.makedirs(f"{{root}}/global_step_3/actor")
        pc.record_validation(root, 3, {{"{key}": 0.5}}, True)
        pc.commit(root, 3, 1)
        pc.record_validation(root, 4, {{"{key}": 0.6}}, False)
    out[case] = said.getvalue().splitlines()
print(json.dumps(out))
"""


def _world(tmp_path: Path) -> dict[str, str]:
    """Per case: an experiment folder with complete steps 1 and 2 and the damaged record; {case: the record's path}."""
    paths = {}
    for case, data in DAMAGED.items():
        root = tmp_path / case
        for step in (1, 2):
            (root / f"global_step_{step}" / "actor").mkdir(parents=True)
            (root / f"global_step_{step}" / "verl-p40-complete").write_text(f"{step}\n")
        (root / "verl-p40-marked-saves").write_text("marked\n")
        (root / "verl-p40-run.json").write_bytes(data)
        paths[case] = str(root / "verl-p40-run.json")
    return paths


def _check(tmp_path: Path, said: dict[str, list[str]]) -> None:
    for case, data in DAMAGED.items():
        root = tmp_path / case
        record = root / "verl-p40-run.json"
        aside = sorted(root.glob("verl-p40-run.json.damaged-*"))
        lines = said[case]
        assert len(aside) == 1 and aside[0].read_bytes() == data, case  # kept aside as it was
        assert not record.exists(), f"{case}: rewritten from empty: {record.read_text()!r}"
        damage = [line for line in lines if line.startswith(f"verl-p40: {record}: ")]
        assert len(damage) == 1, (case, lines)  # said once, in one line
        assert f"kept aside as {aside[0]}" in damage[0] and "training goes on" in damage[0], damage[0]
        assert any(line.startswith("verl-p40: validation accuracy 60.0% at step 4; not kept") for line in lines), lines
        assert sorted(p.name for p in root.glob("global_step_*")) == ["global_step_1", "global_step_2", "global_step_3"]


def test_a_damaged_record_in_the_trainer_is_said_kept_aside_and_never_rewritten(tmp_path, capsys):
    """The package's copy (what eval and export import)."""
    from verl_p40.patches import p40_checkpoints as pc

    paths = _world(tmp_path)
    said = {}
    for case, path in paths.items():
        root = str(Path(path).parent)
        (Path(root) / "global_step_3" / "actor").mkdir(parents=True)
        pc.record_validation(root, 3, {KEY: 0.5}, True)
        pc.commit(root, 3, 1)
        pc.record_validation(root, 4, {KEY: 0.6}, False)
        said[case] = capsys.readouterr().out.splitlines()
    _check(tmp_path, said)


def test_a_damaged_record_in_the_installed_trainer_is_said_kept_aside_and_never_rewritten(patched_verl, tmp_path):
    """The copy the patch set installs into verl (verl/utils/p40_checkpoints.py and its readers), run as verl's
    trainer process imports it: without verl_p40 on the path."""
    paths = _world(tmp_path)
    probe = _PROBE.format(import_line="from verl.utils import p40_checkpoints as pc", key=KEY)
    result = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(patched_verl), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verl_p40" not in result.stderr
    _check(tmp_path, json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_best_after_a_record_kept_aside_names_it(tmp_path, case):
    """eval and export's `best` after the trainer kept a damaged record aside: one line naming the kept-aside file,
    never "no saved step was validated" (which would hand over the newest step silently)."""
    from verl_p40 import UserError
    from verl_p40.models import checkpoints
    from verl_p40.patches import p40_checkpoints as pc

    root = Path(_world(tmp_path)[case]).parent
    (root / "global_step_3" / "actor").mkdir(parents=True)
    pc.record_validation(str(root), 3, {KEY: 0.5}, True)
    pc.commit(str(root), 3, 1)
    aside = next(root.glob("verl-p40-run.json.damaged-*"))
    with pytest.raises(UserError, match=f"kept aside as {aside}"):
        checkpoints.best_checkpoint(tmp_path / case)


def test_a_resumed_train_names_a_record_kept_aside_and_writes_no_new_one(tmp_path):
    """`verl-p40 train` on a folder whose record the trainer kept aside: the one line, never a record from empty."""
    from verl_p40 import UserError
    from verl_p40.models import checkpoints
    from verl_p40.patches import p40_checkpoints as pc

    root = Path(_world(tmp_path)["cut-short"]).parent
    pc.record_validation(str(root), 3, {KEY: 0.5}, False)
    aside = next(root.glob("verl-p40-run.json.damaged-*"))
    with pytest.raises(UserError, match=f"kept aside as {aside}; repair that file and move it back"):
        checkpoints.write_run_record({"checkpoints": str(root), "algorithm": "ppo", "lora": None})
    assert not (root / "verl-p40-run.json").exists()
