import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from hub_mirror import HubMirror
from verl_p40.models.fetch import MANIFEST, REQUIRED

REPO_ID = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.fixture(scope="module")
def model_repo(tokenizer_dir, tmp_path_factory):
    """The real Qwen2.5 config/tokenizer files plus a small stand-in weights file, as a hub repository."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("repo")
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(str(folder))
    for name in ("config.json", "generation_config.json", "LICENSE", "vocab.json", "merges.txt"):
        (folder / name).write_bytes((tokenizer_dir / name).read_bytes())
    save_file({"w": torch.arange(1000, dtype=torch.float32)}, str(folder / "model.safetensors"))
    (folder / "pytorch_model.bin.unused.txt").write_text("not wanted")
    return folder


def fetch(out, endpoint, *extra, offline="0"):
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": offline,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HOME": str(out.parent / "hf-home"),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the package under test, where it is not installed
    }
    return subprocess.run(
        [sys.executable, "-m", "verl_p40.cli", "fetch-model", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )


def test_downloads_verifies_then_skips(model_repo, tmp_path):
    out = tmp_path / "models" / "Qwen2.5-0.5B-Instruct"
    with HubMirror(REPO_ID, model_repo) as hub:
        first = fetch(out, hub.endpoint)
        assert first.returncode == 0, first.stderr
        assert "downloaded" in first.stdout
        for name in (*REQUIRED, "model.safetensors"):
            assert (out / name).read_bytes() == (model_repo / name).read_bytes()
        assert not (out / "pytorch_model.bin.unused.txt").exists()
        manifest = json.loads((out / MANIFEST).read_text())
        assert manifest["repo"] == REPO_ID and manifest["files"]["model.safetensors"] > 0
        assert any(path.endswith("/model.safetensors") for _, path in hub.requests)
        hub.requests.clear()
        second = fetch(out, hub.endpoint)
        assert second.returncode == 0 and "already complete" in second.stdout
        assert hub.requests == []  # no network at all when complete
    assert fetch(out, "http://127.0.0.1:9", offline="1").returncode == 0  # offline and complete: fine


def test_truncated_file_is_refetched(model_repo, tmp_path):
    out = tmp_path / "m"
    with HubMirror(REPO_ID, model_repo) as hub:
        assert fetch(out, hub.endpoint).returncode == 0
        (out / "model.safetensors").write_bytes(b"short")
        again = fetch(out, hub.endpoint)
        assert again.returncode == 0 and "downloaded" in again.stdout
        assert (out / "model.safetensors").read_bytes() == (model_repo / "model.safetensors").read_bytes()


def test_repository_without_weights_is_refused_and_nothing_left(model_repo, tmp_path):
    partial = tmp_path / "repo-no-weights"
    partial.mkdir()
    for f in model_repo.iterdir():
        if f.suffix != ".safetensors":
            (partial / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "models" / "m"
    with HubMirror(REPO_ID, partial) as hub:
        result = fetch(out, hub.endpoint)
    assert result.returncode == 2 and "no *.safetensors weights" in result.stderr
    assert not out.exists() and not (tmp_path / "models").exists()  # refused before anything was written


def test_unreachable_hub_is_one_clear_line(tmp_path):
    result = fetch(tmp_path / "m", "http://127.0.0.1:9")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cannot get the file list of Qwen/Qwen2.5-0.5B-Instruct from http://127.0.0.1:9" in result.stderr
    assert "HF_ENDPOINT" in result.stderr
    offline = fetch(tmp_path / "m", "http://127.0.0.1:9", offline="1")
    assert offline.returncode == 2 and "HF_HUB_OFFLINE is set" in offline.stderr


def test_existing_files_in_the_folder_are_never_deleted(model_repo, tmp_path):
    """--out . or a folder holding other work: the download adds the model's files and removes nothing."""
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "data.bin").write_bytes(b"\x00" * 10)
    with HubMirror(REPO_ID, model_repo) as hub:
        result = fetch(out, hub.endpoint)
        forced = fetch(out, hub.endpoint, "--force")
    assert result.returncode == 0 and forced.returncode == 0, result.stderr + forced.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "sub" / "data.bin").read_bytes() == b"\x00" * 10
    assert (out / "model.safetensors").read_bytes() == (model_repo / "model.safetensors").read_bytes()


def test_a_folder_copied_by_hand_is_accepted_after_verification(model_repo, tmp_path):
    out = tmp_path / "copied"
    out.mkdir()
    for path in model_repo.iterdir():  # the whole repository, as `git clone` or a USB stick would bring it
        (out / path.name).write_bytes(path.read_bytes())
    with HubMirror(REPO_ID, model_repo) as hub:
        result = fetch(out, hub.endpoint)
        assert not any(path.endswith("/model.safetensors") for _, path in hub.requests)  # nothing downloaded
    assert result.returncode == 0 and "copied by hand; matches the hub's file list" in result.stdout
    assert json.loads((out / MANIFEST).read_text())["files"]["model.safetensors"] > 0
    offline = tmp_path / "offline"
    offline.mkdir()
    for name in (*REQUIRED, "model.safetensors"):
        (offline / name).write_bytes((model_repo / name).read_bytes())
    local = fetch(offline, "http://127.0.0.1:9", offline="1")
    assert local.returncode == 0 and "checked locally only (HF_HUB_OFFLINE is set)" in local.stdout


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "model"
    target.write_text("not a folder")
    result = fetch(target, "http://127.0.0.1:9")
    assert (
        result.returncode == 2
        and result.stderr.strip() == f"verl-p40 fetch-model: error: --out {target}: is a file, not a folder"
    )
    assert target.read_text() == "not a folder"


def test_air_gapped_copy_from_a_folder_brought_on_a_disk(model_repo, tmp_path):
    """`fetch-model --from DIR` with no hub at all (HF_HUB_OFFLINE=1, an unreachable endpoint): the folder is checked,
    copied file by file with a manifest, and a second run finds everything in place."""
    bundle = tmp_path / "disk" / "Qwen2.5-0.5B-Instruct"
    bundle.mkdir(parents=True)
    for item in model_repo.iterdir():
        (bundle / item.name).write_bytes(item.read_bytes())
    out = tmp_path / "models" / "Qwen2.5-0.5B-Instruct"
    first = fetch(out, "http://127.0.0.1:9", "--from", str(bundle), offline="1")
    assert first.returncode == 0, first.stderr
    assert "copied" in first.stdout and (out / MANIFEST).is_file()
    assert (out / "model.safetensors").read_bytes() == (bundle / "model.safetensors").read_bytes()
    assert not (out / "pytorch_model.bin.unused.txt").exists()  # only what a model folder needs
    # a tokenizer saved by transformers >= 4.43 keeps its chat template in chat_template.jinja: it must come along
    assert (bundle / "chat_template.jinja").is_file()
    assert (out / "chat_template.jinja").read_bytes() == (bundle / "chat_template.jinja").read_bytes()
    again = fetch(out, "http://127.0.0.1:9", "--from", str(bundle), offline="1")
    assert again.returncode == 0 and "already in place" in again.stdout


def test_air_gapped_copy_refuses_an_incomplete_folder_and_writes_nothing(model_repo, tmp_path):
    bundle = tmp_path / "disk" / "model"
    bundle.mkdir(parents=True)
    for item in model_repo.iterdir():
        if item.suffix != ".safetensors":
            (bundle / item.name).write_bytes(item.read_bytes())
    out = tmp_path / "models" / "m"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    result = fetch(out, "http://127.0.0.1:9", "--from", str(bundle), offline="1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"verl-p40 fetch-model: error: --from {bundle}: not a complete model folder (no weights (*.safetensors)); "
        "nothing copied"
    ]
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_a_users_file_of_a_model_files_name_is_never_overwritten(model_repo, tmp_path):
    """A file fetch-model did not write, under a name it would download: kept when it is the hub's size (copied by
    hand), and the download stops in one line otherwise; the same for --from."""
    out = tmp_path / "work"
    out.mkdir()
    (out / "config.json").write_text('{"model_type": "llama"}')  # another model's
    with HubMirror(REPO_ID, model_repo) as hub:
        result = fetch(out, hub.endpoint)
        assert not hub.requests or all(not path.endswith("model.safetensors") for _, path in hub.requests)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"verl-p40 fetch-model: error: {out / 'config.json'}: already there and not written by verl-p40 fetch-model; "
        "move it away (or remove it), or choose another --out"
    ]
    assert [p.name for p in out.iterdir()] == ["config.json"] and "llama" in (out / "config.json").read_text()
    (out / "config.json").write_bytes((model_repo / "config.json").read_bytes())  # copied by hand: kept as it is
    os.utime(out / "config.json", ns=(1, 1))
    with HubMirror(REPO_ID, model_repo) as hub:
        kept = fetch(out, hub.endpoint)
        assert not any(path.endswith("/config.json") for _, path in hub.requests if "resolve" in path)
    assert kept.returncode == 0, kept.stderr
    assert (out / "config.json").stat().st_mtime_ns == 1
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for item in model_repo.iterdir():
        (bundle / item.name).write_bytes(item.read_bytes())
    other = tmp_path / "other"
    other.mkdir()
    (other / "merges.txt").write_text("my merges")
    copied = fetch(other, "http://127.0.0.1:9", "--from", str(bundle), offline="1")
    assert copied.returncode == 2 and f"{other / 'merges.txt'}: already there and not written" in copied.stderr
    assert [p.name for p in other.iterdir()] == ["merges.txt"]


def test_a_download_that_is_not_a_usable_model_is_not_certified(model_repo, tmp_path):
    """The hub's list and sizes are not enough: a weights file whose header needs more bytes than it has (served cut
    short, the listing agreeing) is refused and no manifest is written, so no later run trusts the folder."""
    broken = tmp_path / "broken-repo"
    broken.mkdir()
    for item in model_repo.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    (broken / "model.safetensors").write_bytes((model_repo / "model.safetensors").read_bytes()[:-10])
    out = tmp_path / "m"
    with HubMirror(REPO_ID, broken) as hub:
        result = fetch(out, hub.endpoint)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"verl-p40 fetch-model: error: {REPO_ID}: the downloaded folder is not usable: model.safetensors: cut short"
        )
    )
    assert not (out / MANIFEST).exists()
