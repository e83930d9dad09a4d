"""The prep folder's manifest (`.verl-p40-data.json` beside the parquet files): what the output was made from and
what was written. The converter writes it with the parquet files, renamed into place after them; `prep
--skip-existing` and the doctor's data check (`changed_outputs`) read it. Below both, it imports neither."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from verl_p40 import __version__, state_files
from verl_p40.outputs import OutputFolder

MANIFEST = ".verl-p40-data.json"
SCHEMA_VERSION = 1


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_identity(source: str) -> dict[str, Any]:
    """What the output was made from: the source string, and for a local folder its files' content hashes (a
    hub source is identified by its name; its files sit in the datasets cache)."""
    if source.startswith("hf:"):
        return {"source": source}
    folder = Path(source)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".parquet"))
    return {"source": str(folder.resolve()), "files": {str(p.relative_to(folder)): _sha256(p) for p in files}}


def request(
    source: str, limit: int | None, skip_invalid: bool, instruction: str, val_size: int | None = None
) -> dict[str, Any]:
    """Everything that decides prep's output: if it matches a manifest, the output is what this run would write."""
    return {
        "schema_version": SCHEMA_VERSION,
        **source_identity(source),
        "limit": limit,
        "skip_invalid": skip_invalid,
        "instruction": instruction,
        "val_size": val_size,
    }


def read_manifest(out_dir: Path) -> tuple[dict | None, str | None]:
    """(the manifest in `out_dir`, None), (None, None) when there is none, or (None, what is wrong with it): read whole
    and checked (an object whose `outputs` map each split to its rows, bytes and hash)."""
    manifest, problem = state_files.read_json(Path(out_dir) / MANIFEST)
    if manifest is None:
        return None, problem
    outputs = manifest.get("outputs", {})
    if not isinstance(outputs, dict):
        return None, f"its outputs are {state_files.kind_of(outputs)}, not an object"
    for split, entry in outputs.items():
        if not isinstance(entry, dict) or any(
            isinstance(entry.get(key), bool) or not isinstance(entry.get(key), int) for key in ("rows", "bytes")
        ):
            return None, f"its entry for {split} is not one prep writes (rows, bytes, sha256)"
    return manifest, None


def manifest_train_rows(out_dir: Path) -> int:
    """The train rows the manifest in `out_dir` lists, with those held out as val (0 without a whole one)."""
    outputs = (read_manifest(out_dir)[0] or {}).get("outputs", {})
    return sum(outputs.get(split, {}).get("rows", 0) for split in ("train", "val"))


def manifest_problems(
    out_dir: Path, wanted: dict[str, Any], splits: Iterable[str], same: dict[str, Any] | None = None
) -> list[str]:
    """Why the parquet files in `out_dir` are not what prep would write for `wanted`, as the `splits` it writes
    (empty: they are). `same`: a setting's other value that writes the same files (prep's default validation slice
    and its size asked for by number)."""
    same = same or {}
    manifest, problem = read_manifest(out_dir)
    if problem:
        return [f"{MANIFEST}: {problem}"]
    if manifest is None:
        return [f"no {MANIFEST} (not written by verl-p40 prep, or prep did not finish)"]
    problems = [
        f"made with {key} {manifest.get(key)!r}, now {value!r}"
        for key, value in wanted.items()
        if key != "files" and manifest.get(key) != value and not (key in same and manifest.get(key) == same[key])
    ]
    if manifest.get("files") != wanted.get("files"):
        problems.append("the source files changed since")
    for split, entry in (manifest.get("outputs") or {}).items():
        path = Path(out_dir) / f"{split}.parquet"
        if not path.is_file():
            problems.append(f"{path.name} is missing")
        elif path.stat().st_size != entry.get("bytes") or _sha256(path) != entry.get("sha256"):
            problems.append(f"{path.name} is not the file prep wrote")
    if set(manifest.get("outputs") or {}) != set(splits):
        problems.append("the manifest does not list every split")
    return problems


def manifest_text(wanted: dict[str, Any], results: dict, paths: dict[str, Path]) -> str:
    """The manifest of what prep wrote: `results` maps each split to its `gsm8k.SplitResult`, `paths` to its file."""
    outputs = {
        split: {
            "rows": len(results[split].rows),
            "skipped": len(results[split].skipped),
            "bytes": paths[split].stat().st_size,
            "sha256": _sha256(paths[split]),
        }
        for split in paths
    }
    return json.dumps({**wanted, "verl_p40": __version__, "outputs": outputs}, indent=2) + "\n"


def output_folder(out_dir: Path) -> OutputFolder:
    """prep's --out. Besides the files its ledger lists, prep's own are what an earlier version wrote: a manifest, and
    the parquet files it lists as they were written."""

    def adopt(name: str, path: Path) -> bool:
        manifest = read_manifest(out_dir)[0]
        if manifest is None:
            return False
        if name == MANIFEST:
            return "schema_version" in manifest
        entry = (manifest.get("outputs") or {}).get(name.removesuffix(".parquet")) or {}
        return path.is_file() and path.stat().st_size == entry.get("bytes") and _sha256(path) == entry.get("sha256")

    return OutputFolder(out_dir, "--out", "prep", adopt=adopt)


def changed_outputs(folder: Path) -> list[str]:
    """The parquet files in `folder` that differ from what prep wrote there (per its manifest; none without one)."""
    manifest, problem = read_manifest(folder)
    if problem:
        return [f"{MANIFEST}: {problem}; run verl-p40 prep --out {folder} again"]
    outputs = (manifest or {}).get("outputs", {})
    return [
        f"{split}.parquet: changed since verl-p40 prep wrote it ({MANIFEST})"
        for split, entry in outputs.items()
        if (folder / f"{split}.parquet").is_file() and _sha256(folder / f"{split}.parquet") != entry.get("sha256")
    ]
