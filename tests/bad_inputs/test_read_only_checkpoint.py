"""A checkpoint on a read-only disk (issue 57): a backup disk or a `:ro` volume that was never merged. eval and export
merge it into the temporary directory for the command, said in one line, and leave the disk as it was; with the
temporary directory read-only too, one line says where the merge would have to go. The disk is a tmpfs remounted
read-only (root ignores a folder's permission bits, not a read-only mount); verl's merger stands in as a copy of a
tiny model into its --target_dir (the merge itself is shown by tests/unit_run)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from bad_inputs.conftest import snapshot
from bad_inputs.test_faults import read_only, small_disk
from verl_p40 import UserError, cli
from verl_p40.models import checkpoints

ROFS = "Read-only file system"


def _never_merged(disk: Path) -> Path:
    """checkpoints/exp with step 4 saved as verl does (tracker, actor shard) and no merged model beside it."""
    actor = disk / "checkpoints" / "exp" / "global_step_4" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
    (actor.parent.parent / checkpoints.TRACKER).write_text("4")
    return actor


@pytest.fixture()
def merger(monkeypatch, tiny_model):
    """verl's merger as a copy of the tiny model into the folder it is given."""
    code = "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])"
    monkeypatch.setattr(
        checkpoints, "merge_command", lambda actor, target: [sys.executable, "-c", code, str(tiny_model), str(target)]
    )


def test_export_and_eval_of_a_read_only_checkpoint_merge_into_the_temporary_directory(
    merger, prepared, monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(tempfile, "tempdir", str((tmp_path / "tmp").resolve()))
    (tmp_path / "tmp").mkdir()
    with small_disk(tmp_path / "disk", size="16m") as disk:
        actor = _never_merged(disk)
        read_only(disk)
        before = snapshot(disk)
        argv = [
            "export",
            "--model",
            "latest",
            "--checkpoints",
            str(disk / "checkpoints"),
            "--out",
            str(tmp_path / "out"),
        ]
        code = cli.main([*argv, "--dtype", "fp32"])
        said = capsys.readouterr()
        assert code == 0, said.err
        assert "Traceback" not in said.err + said.out
        line = [ln for ln in said.out.splitlines() if "cannot write the merged model" in ln]
        assert line == [
            f"[verl-p40] {actor}: cannot write the merged model beside it ({ROFS}); merging into "
            + line[0].split("merging into ", 1)[1]
        ]
        assert f"merging into {tmp_path / 'tmp'}/verl-p40-merged-" in line[0]
        assert line[0].endswith("for this command only (removed when it ends; set TMPDIR for another place)")
        exported = tmp_path / "out" / "global_step_4-hf-fp32"  # named after its step, as beside the checkpoint
        assert json.loads((exported / "config.json").read_text())["model_type"] == "qwen2"
        assert snapshot(disk) == before
        code = cli.main(
            ["eval", "--model", "latest", "--checkpoints", str(disk / "checkpoints"), "--data", str(prepared),
             "--out", str(tmp_path / "eval"), "--device", "cpu", "--limit", "1", "--max-new-tokens", "2"]
        )  # fmt: skip
        said = capsys.readouterr()
        assert code == 0, said.err
        assert "Traceback" not in said.err + said.out
        assert f"[verl-p40] {actor}: cannot write the merged model beside it ({ROFS}); merging into " in said.out
        assert json.loads((tmp_path / "eval" / "report.json").read_text())["questions"] == 1
        assert snapshot(disk) == before


def test_a_read_only_checkpoint_and_temporary_directory_is_one_line_naming_both(merger, monkeypatch, tmp_path):
    with small_disk(tmp_path / "disk", size="16m") as disk:
        actor = _never_merged(disk)
        (disk / "tmp").mkdir()
        read_only(disk)
        monkeypatch.setattr(tempfile, "tempdir", str(disk / "tmp"))
        before = snapshot(disk)
        with pytest.raises(UserError) as raised:
            checkpoints.resolve_model("latest", disk / "checkpoints")
        assert str(raised.value) == (
            f"{actor}: cannot write the merged model beside it ({ROFS}), nor in the temporary directory {disk / 'tmp'} "
            f"({ROFS}); set TMPDIR to a folder with room for it (about 4 bytes a parameter), or pass a merged Hugging "
            "Face folder instead"
        )
        assert snapshot(disk) == before
