"""`verl-p40 fetch-model`: download a model from the Hugging Face hub (or a mirror) into a folder, verified.

The hub is asked for the repository's file list and sizes (`HfApi.model_info(files_metadata=True)`), the files are
downloaded with `snapshot_download` into a temporary folder beside the target, checked against that list, and the
folder is renamed into place only when complete. A manifest (`.verl-p40-model.json`) records what was fetched, so
a second run with everything in place skips the download and needs no network. `HF_ENDPOINT` (a mirror) and
`HF_TOKEN` are honoured by huggingface_hub itself.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verl_p40 import UserError

DEFAULT_REPO = "Qwen/Qwen2.5-0.5B-Instruct"
MANIFEST = ".verl-p40-model.json"
# What a causal LM folder needs for verl: config, weights, tokenizer. (Not pytorch_model.bin / tokenizer.model:
# Qwen2.5 ships safetensors and a BPE tokenizer.)
REQUIRED = ("config.json", "generation_config.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.json")
WANTED_PATTERNS = ("*.json", "*.safetensors", "merges.txt", "vocab.json", "LICENSE", "README.md")


@dataclass(frozen=True)
class FetchResult:
    path: Path
    files: dict[str, int]
    skipped: bool


def _manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def verify(folder: Path, expected: dict[str, int]) -> list[str]:
    """Problems with `folder` against the expected {file: size}; empty when complete."""
    problems = []
    for name in REQUIRED:
        if name not in expected:
            problems.append(f"{name}: not in the repository's file list")
    if not any(name.endswith(".safetensors") for name in expected):
        problems.append("no *.safetensors weights in the repository's file list")
    for name, size in sorted(expected.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif size is not None and path.stat().st_size != size:
            problems.append(f"{name}: {path.stat().st_size} bytes, expected {size}")
    return problems


def local_problems(folder: Path) -> list[str]:
    """What stops `folder` from being a usable model folder, checked without the network; empty when usable.

    Against the manifest fetch-model wrote when there is one (every file, its size), else the files a Qwen2.5
    folder needs, weights included (a hand-copied folder)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return ["no model here (config.json missing)"]
    manifest = _manifest(folder)
    if manifest and manifest.get("files"):
        return verify(folder, manifest["files"])
    have = lambda name: (folder / name).is_file()  # noqa: E731
    problems = [f"{name}: missing" for name in ("config.json", "tokenizer_config.json") if not have(name)]
    if not have("tokenizer.json") and not (have("vocab.json") and have("merges.txt")):
        problems.append("no tokenizer (tokenizer.json, or vocab.json and merges.txt)")
    weights = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError):
            return problems + [f"{index.name}: not a safetensors index"]
        problems += [f"{name}: missing (listed in {index.name})" for name in sorted(shards) if not (folder / name).is_file()]
    elif not weights:
        problems.append("no weights (*.safetensors)")
    problems += [f"{w.name}: empty" for w in weights if w.stat().st_size == 0]
    return problems


def complete(folder: Path, repo: str) -> dict[str, int] | None:
    manifest = _manifest(folder)
    if not manifest or manifest.get("repo") != repo:
        return None
    files = manifest.get("files", {})
    return files if not verify(folder, files) else None


def _wanted(name: str) -> bool:
    from fnmatch import fnmatch

    return "/" not in name and any(fnmatch(name, pattern) for pattern in WANTED_PATTERNS)


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


def fetch_model(repo: str, out: Path, revision: str | None = None, force: bool = False) -> FetchResult:
    out = Path(out)
    if not force:
        done = complete(out, repo)
        if done is not None:
            return FetchResult(out, done, skipped=True)
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        raise UserError(f"{out}: no complete copy of {repo} here and HF_HUB_OFFLINE is set")
    sha, files = remote_files(repo, revision)
    from huggingface_hub import snapshot_download

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        try:
            snapshot_download(repo, revision=sha or revision, local_dir=staging, allow_patterns=sorted(files))
        except Exception as exc:
            raise UserError(f"download of {repo} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
        shutil.rmtree(staging / ".cache", ignore_errors=True)  # huggingface_hub's local_dir bookkeeping
        problems = verify(staging, files)
        if problems:
            raise UserError(f"{repo}: downloaded files do not match the hub's list: {'; '.join(problems)}")
        (staging / MANIFEST).write_text(json.dumps({"repo": repo, "revision": sha, "files": files}, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return FetchResult(out, files, skipped=False)
