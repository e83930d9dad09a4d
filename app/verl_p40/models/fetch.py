"""`verl-p40 fetch-model`: download a model from the Hugging Face hub (or a mirror) into a folder, verified.

The hub is asked for the repository's file list and sizes (`HfApi.model_info(files_metadata=True)`), and
`huggingface_hub.snapshot_download(local_dir=...)` brings the files into the target folder itself: it resumes an
interrupted download and skips complete files, and nothing in the folder is ever deleted. The folder is then checked
against the list, and a manifest (`.verl-p40-model.json`, written last) records what was fetched, so a second run with
everything in place skips the download and needs no network. A folder copied by hand is accepted once it matches the
hub's list (or, offline, the local check `doctor` runs). `HF_ENDPOINT` (a mirror) and `HF_TOKEN` are honoured by
huggingface_hub itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from verl_p40 import UserError
from verl_p40.models import verify
from verl_p40.models.verify import MANIFEST
from verl_p40.outputs import OutputFolder

HUB_RECORDS = Path(".cache/huggingface/download")  # where huggingface_hub records what it downloaded into a folder

# What a causal LM folder needs for verl: config, weights, tokenizer. (Not pytorch_model.bin / tokenizer.model:
# Qwen2.5 ships safetensors and a BPE tokenizer.)
REQUIRED = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.json",
)
# *.jinja: transformers >= 4.43 saves the chat template as chat_template.jinja beside tokenizer_config.json; without it
# verl's data loader stops with "tokenizer.chat_template is not set" (seen in the e2e check, docker/e2e/run.sh)
WANTED_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "merges.txt", "vocab.json", "LICENSE", "README.md")


@dataclass(frozen=True)
class FetchResult:
    path: Path
    files: dict[str, int]
    skipped: bool
    note: str = ""


def listing_problems(expected: dict[str, int]) -> list[str]:
    """What a repository's file list lacks for verl (config, tokenizer, safetensors weights)."""
    problems = [f"{name}: not in the repository's file list" for name in REQUIRED if name not in expected]
    if not any(name.endswith(".safetensors") for name in expected):
        problems.append("no *.safetensors weights in the repository's file list")
    return problems


def complete(folder: Path, repo: str) -> dict[str, int] | None:
    manifest = verify.manifest(folder)
    if not manifest or manifest.get("repo") != repo:
        return None
    files = manifest.get("files", {})
    return files if not verify.problems(folder, files) else None


def _wanted(name: str) -> bool:
    from fnmatch import fnmatch

    return "/" not in name and not name.startswith(".") and any(fnmatch(name, pattern) for pattern in WANTED_PATTERNS)


def remote_files(repo: str, revision: str | None) -> tuple[str, dict[str, int]]:
    """(commit sha, {file: size}) of what we download from `repo`."""
    from huggingface_hub import HfApi

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:  # offline, DNS, 401/404: all end the same way for the user
        raise UserError(
            f"cannot get the file list of {repo} from {endpoint} ({type(exc).__name__}: {str(exc).splitlines()[0]}). "
            "Offline or blocked? Set HF_ENDPOINT to a mirror (e.g. https://hf-mirror.com), HF_TOKEN for gated "
            "models, or copy the model folder into place yourself."
        ) from None
    files = {s.rfilename: s.size for s in info.siblings or [] if _wanted(s.rfilename)}
    return info.sha or "", files


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")


def output_folder(out: Path) -> OutputFolder:
    """fetch-model's --out. Its own files, besides those its ledger lists: the files its manifest lists, and those
    huggingface_hub downloaded there (its bookkeeping in .cache/huggingface/download/)."""

    def adopt(name: str, path: Path) -> bool:
        listed = (verify.manifest(out) or {}).get("files") or {}
        return name == MANIFEST or name in listed or (out / HUB_RECORDS / f"{name}.metadata").is_file()

    return OutputFolder(out, "--out", "fetch-model", adopt=adopt)


def _write_manifest(folder: OutputFolder, repo: str, revision: str, files: dict[str, int]) -> None:
    with folder.write([MANIFEST]) as (temp,):
        temp.write_text(json.dumps({"repo": repo, "revision": revision, "files": files}, indent=2) + "\n")


def _to_download(folder: OutputFolder, files: dict[str, int]) -> list[str]:
    """The files of `files` to download into the folder: a file of the same name that fetch-model did not write is
    kept when it is the hub's size (copied by hand), and stops the download otherwise."""
    names = []
    for name, size in sorted(files.items()):
        path = folder.folder / name
        if os.path.lexists(path) and not folder.owns(name):
            if path.is_file() and size is not None and path.stat().st_size == size:
                continue
            raise UserError(folder.refusal(name))
        names.append(name)
    return names


def fetch_model(repo: str, out: Path, revision: str | None = None, force: bool = False) -> FetchResult:
    with output_folder(Path(out)).writer():  # one fetch-model per folder: a second is refused in one line
        return _fetch_model(repo, Path(out), revision, force)


def _fetch_model(repo: str, out: Path, revision: str | None, force: bool) -> FetchResult:
    folder = output_folder(out)
    folder.check()
    if not force:
        done = complete(out, repo)
        if done is not None:
            return FetchResult(out, done, skipped=True)
    if _offline():
        problems = verify.problems(out)
        if problems:
            raise UserError(
                f"{out}: no complete copy of {repo} here ({'; '.join(problems[:3])}) and HF_HUB_OFFLINE is set"
            )
        files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file() and _wanted(p.name)}
        return FetchResult(out, files, skipped=True, note="checked locally only (HF_HUB_OFFLINE is set)")
    sha, files = remote_files(repo, revision)
    unusable = listing_problems(files)
    if unusable:  # refused before anything is written
        raise UserError(f"{repo}: not a model verl can train: {'; '.join(unusable)}")
    if not force and not verify.problems(out, files):  # copied by hand, and complete
        _write_manifest(folder, repo, sha, files)
        return FetchResult(out, files, skipped=True, note="copied by hand; matches the hub's file list")
    download = _to_download(folder, files)
    from huggingface_hub import hf_hub_download, snapshot_download

    # snapshot_download trusts its own bookkeeping for files it fetched before: one whose size is wrong now (cut
    # short, edited) is fetched again on purpose, and replaced only when the new copy is complete
    wrong = [
        name
        for name in download
        if (out / name).is_file() and files[name] is not None and (out / name).stat().st_size != files[name]
    ]
    try:
        with folder.reasons("write there"):
            out.mkdir(parents=True, exist_ok=True)
            snapshot_download(
                repo, revision=sha or revision, local_dir=out, allow_patterns=download, force_download=force
            )
            for name in wrong:
                hf_hub_download(repo, name, revision=sha or revision, local_dir=out, force_download=True)
    except UserError:
        raise
    except Exception as exc:  # network, auth, the hub's own errors: all end the same way for the user
        raise UserError(
            f"download of {repo} into {out} failed: {type(exc).__name__}: {str(exc).splitlines()[0]} "
            "(run the same command again to resume)"
        ) from None
    problems = verify.problems(out, files)
    if problems:
        raise UserError(f"{repo}: the downloaded folder is not usable: {'; '.join(problems[:3])}")
    _write_manifest(folder, repo, sha, files)
    return FetchResult(out, files, skipped=False)


def copy_model(source: Path, out: Path) -> FetchResult:
    """`fetch-model --from DIR`: the air-gapped path. A model folder brought on a disk (made by `fetch-model --out` on
    a connected host, or copied from the hub by hand) is checked as doctor checks it, then copied into `out` file by
    file (each appears whole or not at all); nothing in `out` is deleted, files already equal are kept, and a file of
    the same name that fetch-model did not write stops the copy before it starts."""

    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise UserError(f"--from {source}: not a folder")
    problems = verify.problems(source)
    if problems:
        raise UserError(f"--from {source}: not a complete model folder ({'; '.join(problems[:3])}); nothing copied")
    folder = output_folder(out)
    folder.check()
    if out.resolve() == source.resolve():
        raise UserError(f"--out {out} is the --from folder; choose another --out")
    with folder.writer():  # one fetch-model per folder: a second is refused in one line
        return _copy_model(folder, source, out)


def _copy_model(folder, source: Path, out: Path) -> FetchResult:
    import shutil

    files = {p.name: p.stat().st_size for p in sorted(source.iterdir()) if p.is_file() and _wanted(p.name)}
    manifest = verify.manifest(source) or {}
    copied = [
        name
        for name, size in files.items()
        if not ((out / name).is_file() and (out / name).stat().st_size == size and _same(source / name, out / name))
    ]
    folder.check([*copied, MANIFEST])  # a user's file of a model file's name: said before anything is copied
    for name in copied:
        with folder.write([name]) as (temp,):
            shutil.copyfile(source / name, temp)
    _write_manifest(folder, manifest.get("repo") or f"local:{source.resolve()}", manifest.get("revision", ""), files)
    note = f"copied {len(copied)} of {len(files)} files from {source}" if copied else f"already equal to {source}"
    return FetchResult(out, files, skipped=not copied, note=note)


def _same(a: Path, b: Path) -> bool:
    import filecmp

    return filecmp.cmp(a, b, shallow=False)
