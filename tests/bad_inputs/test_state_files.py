"""Damaged state files (issue 57): the files verl-p40 writes and reads back later (the run record `best` is chosen from,
verl's tracker, prep's manifest, an output folder's ledger, eval's answers), damaged as a kill, a full disk or an edit
leaves them. Each is one line naming the file, what is wrong and the fix (exit 2, no traceback, nothing changed): never
read as "nothing there", never a silent other step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bad_inputs.conftest import T, check_case, snapshot
from conftest import cli
from verl_p40.data.manifest import MANIFEST
from verl_p40.outputs import LEDGER
from verl_p40.patches import p40_checkpoints as pc


def _save(root: Path, step: int, world_size: int = 1) -> None:
    """A save as the patched verl does it: begin, the workers' files, commit."""
    folder = root / f"global_step_{step}"
    pc.begin(str(folder))
    for rank in range(world_size):
        (folder / "actor").mkdir(parents=True, exist_ok=True)
        (folder / "actor" / f"model_world_size_{world_size}_rank_{rank}.pt").write_bytes(b"w")
    pc.commit(str(root), step)


def _experiment(world: Path, name: str, record, steps=(2, 4), world_size: int = 1) -> Path:
    """checkpoints `name`/exp with saved `steps`, then its run record replaced by `record` (bytes: as they are)."""
    experiment = world / name / "exp"
    for step in steps:
        _save(experiment, step, world_size)
    path = experiment / pc.RUN_RECORD
    path.write_bytes(record if isinstance(record, bytes) else json.dumps(record).encode())
    return experiment


GOOD = {
    "validations": {"0": 0.2, "2": 0.5, "4": 0.3},
    "best": {"step": 2, "accuracy": 0.5, "first_step": 0, "latest_step": 4},
}


def _best(ck: str) -> list[str]:
    return ["export", "--model", "best", "--checkpoints", f"{T}/{ck}", "--out", f"{T}/x"]


RECORD = "exp/verl-p40-run.json: "
RECORD_FIX = "restore it from a copy, or move it away"
CASES = [
    ("record-cut-short", _best("ck-cut"), RECORD + "not whole JSON (", RECORD_FIX),
    ("record-a-list", _best("ck-list"), RECORD + "holds a list, not an object; " + RECORD_FIX, ""),
    ("accuracy-null", _best("ck-null"), RECORD + "the validation accuracy of step 2 is null, not a number from 0", ""),
    ("best-folder-gone", _best("ck-gone"), "names step 2 as the best, but ", "global_step_2 is not there; restore"),
    ("best-not-complete", _best("ck-half"), "names step 2 as the best, but the save of ", "did not complete"),
    (
        "record-disagrees",
        _best("ck-disagree"),
        "names step 2 as the best with accuracy 0.9, but its validations give ",
        "that step validation accuracy 0.5: the record disagrees with itself",
    ),  # fmt: skip
    (
        "tracker-not-utf8",
        [
            "train",
            "--profile",
            "p40",
            "--dry-run",
            "--model",
            f"{T}/nomodel",
            "--data",
            f"{T}/prepared",
            "--checkpoints",
            f"{T}/ck-binary",
            "trainer.experiment_name=exp",
            "--skip-check",
            "model",
        ],  # fmt: skip
        "exp/global_step_4: saved by 2 GPUs and this run has 1",
        "",
    ),
    (
        "ledger-cut-short",
        ["prep", "--source", f"{T}/src", "--out", f"{T}/prepared"],
        f"prepared/{LEDGER}: not whole JSON (",
        "it lists the files verl-p40 wrote in this folder: move it away",
    ),
]


@pytest.fixture()
def damaged(world):
    _experiment(world, "ck-cut", json.dumps(GOOD).encode()[:40])
    _experiment(world, "ck-list", [])
    _experiment(world, "ck-null", {"validations": {"0": 0.2, "2": None}})
    _experiment(world, "ck-gone", GOOD, steps=(4,))
    half = _experiment(world, "ck-half", GOOD)
    (half / "global_step_2" / pc.COMPLETE).unlink()
    _experiment(world, "ck-disagree", {**GOOD, "best": {**GOOD["best"], "accuracy": 0.9}})
    binary = _experiment(world, "ck-binary", GOOD, world_size=2)
    (binary / pc.TRACKER).write_bytes(b"\xff\xfe4\x00")
    ledger = world / "prepared" / LEDGER
    ledger.write_bytes(ledger.read_bytes()[:30])
    return world


@pytest.mark.parametrize(("name", "args", "expected", "also"), CASES, ids=[c[0] for c in CASES])
def test_a_damaged_state_file_is_one_line_naming_it_and_changes_nothing(damaged, name, args, expected, also):
    check_case(damaged, args, {}, expected)
    check_case(damaged, args, {}, also)


def test_a_prep_manifest_that_is_not_an_object_is_said_and_prepared_again(world):
    out = world / "prepared"
    (out / MANIFEST).write_text("[]\n")
    before = snapshot(out)
    result = cli("prep", "--source", str(world / "src"), "--out", str(out), "--skip-existing")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{out}: preparing again: {MANIFEST}: holds a list, not an object" in result.stderr
    assert json.loads((out / MANIFEST).read_text())["outputs"]  # written again, whole
    assert sorted(snapshot(out)) == sorted(before)
    doctor = world / "prepared-copy"
    doctor.mkdir()
    for path in out.iterdir():
        (doctor / path.name).write_bytes(path.read_bytes())
    (doctor / MANIFEST).write_text('{"outputs": []}')
    result = cli("doctor", "--data", str(doctor), "--only", "data")
    assert "Traceback" not in result.stderr + result.stdout
    assert f"{MANIFEST}: its outputs are a list, not an object; run verl-p40 prep --out {doctor} again" in result.stdout


def test_an_answers_file_that_is_not_utf8_is_named_with_its_line(world):
    out = world / "ev"
    out.mkdir()
    (out / "answers.jsonl").write_bytes(b'{"index": 0}\n{"index": 1, "q": "caf\xe9"}\n')
    check_case(
        world,
        ["eval", "--model", f"{T}/nomodel", "--data", f"{T}/prepared", "--out", f"{T}/ev", "--device", "cpu"],
        {},
        "ev/answers.jsonl:2: not UTF-8 text; remove the line or the file to start over",
    )
