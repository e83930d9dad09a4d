"""An output folder is written only inside, never through a link, never over a file the command did not write there,
and each output whole or not at all; the ledger is how a command knows its own files."""

import json
import os
import tempfile

import pytest

from verl_p40 import UserError
from verl_p40.outputs import LEDGER, OutputFolder, Temporaries, library_caches, made, os_reason, remove_empty


def _write(folder: OutputFolder, name: str, text: str) -> None:
    with folder.write([name]) as (temp,):
        temp.write_text(text)


def test_its_own_file_is_replaced_and_a_users_file_is_not(tmp_path):
    out = OutputFolder(tmp_path / "out", "--out", "eval")
    _write(out, "report.json", "one")
    _write(out, "report.json", "two")  # its own: replaced
    assert (tmp_path / "out" / "report.json").read_text() == "two"
    (tmp_path / "out" / "report.json").write_text("damaged")
    _write(out, "report.json", "three")  # its own still, whatever became of it
    assert (tmp_path / "out" / "report.json").read_text() == "three"
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"notes.txt: already there and not written by verl-p40 eval; move it away"):
        _write(out, "notes.txt", "x")
    (tmp_path / "out" / "report.json").unlink()
    (tmp_path / "out" / "report.json").mkdir()  # a folder where its file was: not its own
    with pytest.raises(UserError, match=r"report.json: already there and not written by verl-p40 eval"):
        _write(out, "report.json", "four")
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine" and (tmp_path / "out" / "report.json").is_dir()


def test_a_link_is_never_written_through_nor_replaced(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    out = OutputFolder(tmp_path / "out", "--out", "eval")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.json").symlink_to(outside)
    with pytest.raises(UserError, match="report.json: a symbolic link; verl-p40 eval writes only inside --out"):
        _write(out, "report.json", "x")
    assert outside.read_text() == "keep" and (tmp_path / "out" / "report.json").is_symlink()


def test_its_own_folder_is_replaced_whole_and_one_with_a_users_file_in_it_is_not(tmp_path):
    out = OutputFolder(tmp_path, "--out", "export")
    for text in ("old", "new"):
        with out.write(["model"], directory=True) as (temp,):
            (temp / "config.json").write_text(text)
            (temp / text).write_text(text)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json", "new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER, "model"]  # the old one gone, no temporary left
    (tmp_path / "model" / "config.json").write_text("edited")  # its own file in it, changed: still its own
    (tmp_path / "model" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="model/notes.txt: not written by verl-p40 export, and model would be replaced"):
        with out.write(["model"], directory=True) as (temp,):
            (temp / "config.json").write_text("newer")
    assert (tmp_path / "model" / "notes.txt").read_text() == "mine"


def test_a_failed_block_leaves_what_was_there_and_no_temporary(tmp_path):
    out = OutputFolder(tmp_path, "--out", "export")
    _write(out, "a.gguf", "old")
    with pytest.raises(RuntimeError):
        with out.write(["a.gguf", "b"], directory=[False, True]) as (a, b):
            a.write_text("half")
            raise RuntimeError("the writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER, "a.gguf"]
    assert (tmp_path / "a.gguf").read_text() == "old"
    _write(out, "a.gguf", "again")  # and it is still its own
    assert (tmp_path / "a.gguf").read_text() == "again"


def test_a_stop_between_the_ledger_and_the_renames_leaves_either_state_its_own(tmp_path):
    out = OutputFolder(tmp_path, "--out", "prep")
    _write(out, "train.parquet", "old")
    with pytest.raises(KeyboardInterrupt):
        with out.write(["train.parquet"]) as (temp,):
            temp.write_text("new")
            out._record({"train.parquet": temp})  # the ledger as written before the renames...
            raise KeyboardInterrupt  # ...and a stop before them
    assert out.owns("train.parquet") and (tmp_path / "train.parquet").read_text() == "old"


def test_adopt_recognises_what_an_earlier_version_wrote(tmp_path):
    (tmp_path / "old.json").write_text('{"written by": "verl-p40 0.0.9"}')
    out = OutputFolder(tmp_path, "--out", "prep", adopt=lambda name, path: "verl-p40" in path.read_text())
    _write(out, "old.json", "{}")
    assert json.loads((tmp_path / LEDGER).read_text())["outputs"]["old.json"]["by"] == "prep"


def test_remove_takes_only_its_own(tmp_path):
    out = OutputFolder(tmp_path, "--out", "prep")
    _write(out, "val.parquet", "v")
    assert out.remove("val.parquet") and not (tmp_path / "val.parquet").exists()
    assert "val.parquet" not in json.loads((tmp_path / LEDGER).read_text())["outputs"]
    (tmp_path / "val.parquet").write_text("mine")
    with pytest.raises(UserError, match="val.parquet: already there and not written by verl-p40 prep"):
        out.remove("val.parquet")
    assert (tmp_path / "val.parquet").read_text() == "mine" and not out.remove("nothing")


def test_a_file_in_place_of_the_folder_or_above_it(tmp_path):
    (tmp_path / "a-file").write_text("keep")
    with pytest.raises(UserError, match=r"^--out .*a-file: is a file, not a folder$"):
        OutputFolder(tmp_path / "a-file", "--out", "eval").check()
    with pytest.raises(UserError, match=r"^--out .*a-file/x/y: .*a-file is a file, not a folder$"):
        OutputFolder(tmp_path / "a-file" / "x" / "y", "--out", "eval").check()


def test_stale_temporaries_of_its_names_are_removed(tmp_path):
    (tmp_path / ".report.json.abc.tmp").write_text("half")
    (tmp_path / ".model.xyz.tmp").mkdir()
    (tmp_path / ".other.abc.tmp").write_text("not ours to judge")
    _write(OutputFolder(tmp_path, "--out", "eval"), "report.json", "{}")
    OutputFolder(tmp_path, "--out", "eval").remove_stale_temps(["model"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.abc.tmp", LEDGER, "report.json"]


def test_a_refused_write_is_one_line_whatever_the_library(tmp_path):
    class RustError(Exception):  # as safetensors reports a failed write
        pass

    assert os_reason(RustError('IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')) == (
        os.strerror(28)
    )
    assert os_reason(OSError(30, "Read-only file system")) == "Read-only file system"
    assert os_reason(RustError("a tensor has no name")) is None and os_reason(KeyboardInterrupt()) is None
    out = OutputFolder(tmp_path, "--out", "export")
    with pytest.raises(UserError, match=r"^--out .*: cannot write x.gguf \(No space left on device\)$"):
        with out.write(["x.gguf"]):
            raise RustError("Error while serializing: IoError(No space left on device)")
    assert [p.name for p in tmp_path.iterdir()] == []


def test_append_adds_whole_lines_to_its_own_file_only(tmp_path):
    out = OutputFolder(tmp_path / "out", "--out", "monitor")
    with out.append("gpu.csv") as add:
        add(b"ts,gpu\n")
    with out.append("gpu.csv") as add:  # a second run: its own file, added to
        add(b"1,0\n")
    assert (tmp_path / "out" / "gpu.csv").read_bytes() == b"ts,gpu\n1,0\n"
    assert json.loads((tmp_path / "out" / LEDGER).read_text())["outputs"]["gpu.csv"]["kind"] == "file"
    (tmp_path / "out" / "notes.csv").write_text("mine\n")
    (tmp_path / "out" / "link.csv").symlink_to(tmp_path / "out" / "notes.csv")
    with pytest.raises(UserError, match=r"notes.csv: already there and not written by verl-p40 monitor; move it"):
        with out.append("notes.csv") as add:
            add(b"x\n")
    with pytest.raises(UserError, match=r"link.csv: a symbolic link; verl-p40 monitor writes only inside --out"):
        with out.append("link.csv") as add:
            add(b"x\n")
    assert (tmp_path / "out" / "notes.csv").read_text() == "mine\n"


def test_append_takes_a_refused_write_back_and_drops_a_line_a_kill_cut_short(tmp_path, monkeypatch):
    out = OutputFolder(tmp_path, "--out", "monitor")
    with out.append("gpu.csv") as add:
        add(b"ts,gpu\n1,0\n")
    real_write = os.write

    def half_then_full(fd, data):  # the disk fills in the middle of a batch
        monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(28, os.strerror(28))))
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(UserError, match=r"^--out .*: cannot write gpu.csv \(No space left on device\)$"):
        with out.append("gpu.csv") as add:
            add(b"2,0\n3,0\n")
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / "gpu.csv").read_bytes() == b"ts,gpu\n1,0\n"  # none of the batch
    with open(tmp_path / "gpu.csv", "ab") as handle:
        handle.write(b"4,")  # what a kill in the middle of a line leaves
    with out.append("gpu.csv") as add:
        add(b"5,0\n")
    assert (tmp_path / "gpu.csv").read_bytes() == b"ts,gpu\n1,0\n5,0\n"
    (tmp_path / "gpu.csv").write_bytes(b"ts,g")  # not one whole line
    with out.append("gpu.csv") as add:
        assert (tmp_path / "gpu.csv").stat().st_size == 0
        add(b"ts,gpu\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER, "gpu.csv"]


def test_a_new_appended_file_is_its_own_even_when_the_run_stops_before_a_line(tmp_path):
    out = OutputFolder(tmp_path, "--out", "monitor")
    with pytest.raises(KeyboardInterrupt):
        with out.append("gpu.csv"):
            raise KeyboardInterrupt
    assert out.owns("gpu.csv") and (tmp_path / "gpu.csv").read_bytes() == b""


def test_rename_moves_its_own_file_and_the_ledger_follows(tmp_path):
    out = OutputFolder(tmp_path, "--out", "monitor")
    _write(out, "gpu.csv", "new")
    _write(out, "gpu.csv.1", "old")
    out.rename("gpu.csv", "gpu.csv.1")  # onto its own: replaced
    assert not (tmp_path / "gpu.csv").exists() and (tmp_path / "gpu.csv.1").read_text() == "new"
    assert sorted(json.loads((tmp_path / LEDGER).read_text())["outputs"]) == ["gpu.csv.1"]
    (tmp_path / "gpu.csv").write_text("a user's")  # a name it no longer holds is not its own
    with pytest.raises(UserError, match=r"gpu.csv: already there and not written by verl-p40 monitor"):
        out.rename("gpu.csv", "gpu.csv.2")
    (tmp_path / "gpu.csv").unlink()
    (tmp_path / "gpu.csv.2").write_text("mine")
    with pytest.raises(UserError, match=r"gpu.csv.2: already there and not written by verl-p40 monitor"):
        out.rename("gpu.csv.1", "gpu.csv.2")
    assert (tmp_path / "gpu.csv.1").read_text() == "new" and (tmp_path / "gpu.csv.2").read_text() == "mine"


def test_two_writers_appending_to_one_file_never_mix_or_cut_each_others_lines(tmp_path):
    """The gpu-monitor service and a `monitor --once` may add to the same gpu.csv: each batch lands whole, in turn."""
    import multiprocessing

    with OutputFolder(tmp_path, "--out", "monitor").append("gpu.csv") as add:  # the command's own file first
        add(b"")
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_append_batches, args=(tmp_path, tag)) for tag in "ab"]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    lines = (tmp_path / "gpu.csv").read_text().splitlines()
    assert len(lines) == 2 * 200 * 50
    assert all(line in (f"a,{'x' * 300}", f"b,{'y' * 300}") for line in lines)


def _append_batches(folder, tag: str) -> None:
    line = f"{tag},{('x' if tag == 'a' else 'y') * 300}\n".encode()
    with OutputFolder(folder, "--out", "monitor").append("gpu.csv") as add:
        for _ in range(200):
            add(line * 50)


def test_a_failed_write_leaves_no_folder_it_made_and_keeps_those_that_were_there(tmp_path):
    out = OutputFolder(tmp_path / "new" / "deeper" / "out", "--out", "export")
    with pytest.raises(RuntimeError), out.write(["model"], directory=True) as (temp,):
        (temp / "weights").write_text("half")
        raise RuntimeError("the converter gave up")
    assert list(tmp_path.iterdir()) == []  # out, deeper and new: none of them is left
    (tmp_path / "there").mkdir()
    out = OutputFolder(tmp_path / "there" / "out", "--out", "export")
    with pytest.raises(RuntimeError), out.write(["model"]):
        raise RuntimeError("again")
    assert [p.name for p in tmp_path.iterdir()] == ["there"] and list((tmp_path / "there").iterdir()) == []
    _write(out, "model", "whole")  # a write that succeeds keeps its folder
    assert sorted(p.name for p in (tmp_path / "there" / "out").iterdir()) == [LEDGER, "model"]


def test_made_removes_only_empty_folders_it_made(tmp_path):
    with pytest.raises(KeyError), made(tmp_path / "a" / "b"):
        (tmp_path / "a" / "b" / "kept.txt").write_text("someone's")  # a file in it: it stays, and so do the folders
        raise KeyError("x")
    assert (tmp_path / "a" / "b" / "kept.txt").read_text() == "someone's"
    with made(tmp_path / "c" / "d", keep=False):  # a check that only tries: made, then removed
        assert (tmp_path / "c" / "d").is_dir()
    assert not (tmp_path / "c").exists()
    (tmp_path / "target").mkdir()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "link").symlink_to(tmp_path / "target")
    remove_empty([tmp_path / "e"])
    assert (tmp_path / "e" / "link").is_symlink() and (tmp_path / "target").is_dir()  # never through a link


def test_a_failed_command_removes_the_empty_library_cache_it_made(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads $TMPDIR again
    (cache,) = library_caches()
    assert cache.parent == tmp_path and cache.name.startswith("torchinductor_")
    made_now = Temporaries()
    (cache / "dynamo").mkdir(parents=True)  # as `import torch._dynamo` makes it
    made_now.remove()
    assert not cache.exists()
    cache.mkdir()
    Temporaries().remove()  # there before the command: never removed
    assert cache.is_dir()
    cache.rmdir()
    in_use = Temporaries()
    (cache / "triton").mkdir(parents=True)
    (cache / "triton" / "kernel.so").write_bytes(b"compiled")  # a cache with something in it: kept
    in_use.remove()
    assert (cache / "triton" / "kernel.so").is_file()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert library_caches() == []  # a place the user chose is theirs
