"""Outputs appear whole or not at all, with the permissions the umask gives (not mkstemp's 0600)."""

import os

import pytest

from verl_p40.atomic import staged, write_text


def test_written_files_get_the_umask_permissions(tmp_path):
    previous = os.umask(0o022)
    try:
        write_text(tmp_path / "report.json", "{}\n")
    finally:
        os.umask(previous)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o644


def test_a_failed_block_leaves_the_target_and_no_temp_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with staged([target]) as (temp,):
            temp.write_text("new, half written")
            raise RuntimeError("disk full")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_staged_folder_appears_whole_or_not_at_all(tmp_path):
    """eval's merged model: written into a temporary folder, renamed into place only when complete."""
    from verl_p40.atomic import staged

    target = tmp_path / "merged"
    with pytest.raises(RuntimeError):
        with staged([target], directory=True) as (temp,):
            (temp / "config.json").write_text("{}")
            raise RuntimeError("the merger failed")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with staged([target], directory=True) as (temp,):
        (temp / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["merged"]
