"""`verl-p40 prep`: GSM8K to verl's parquet (`verl_p40.data.gsm8k` converts), with a manifest (`.verl-p40-data.json`
beside the parquet files) of what the output was made from and what was written, so `prep --skip-existing` skips
only when the files are exactly what this prep would write."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from verl_p40 import UserError
from verl_p40.data import gsm8k as data
from verl_p40.atomic import write_text
from verl_p40.data.gsm8k import SplitResult

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


def request(source: str, limit: int | None, skip_invalid: bool, instruction: str, val_size: int = 0) -> dict[str, Any]:
    """Everything that decides prep's output: if it matches a manifest, the output is what this run would write."""
    return {"schema_version": SCHEMA_VERSION, **source_identity(source), "limit": limit, "skip_invalid": skip_invalid,
            "instruction": instruction, "val_size": val_size}



def manifest_problems(out_dir: Path, wanted: dict[str, Any]) -> list[str]:
    """Why the parquet files in `out_dir` are not what prep would write for `wanted` (empty: they are)."""
    try:
        manifest = json.loads((Path(out_dir) / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"no {MANIFEST} (not written by verl-p40 prep, or prep did not finish)"]
    except (OSError, ValueError) as exc:
        return [f"{MANIFEST} unreadable ({exc})"]
    problems = [f"made with {key} {manifest.get(key)!r}, now {value!r}" for key, value in wanted.items()
                if key != "files" and manifest.get(key) != value]
    if manifest.get("files") != wanted.get("files"):
        problems.append("the source files changed since")
    for split, entry in (manifest.get("outputs") or {}).items():
        path = Path(out_dir) / f"{split}.parquet"
        if not path.is_file():
            problems.append(f"{path.name} is missing")
        elif path.stat().st_size != entry.get("bytes") or _sha256(path) != entry.get("sha256"):
            problems.append(f"{path.name} is not the file prep wrote")
    if set(manifest.get("outputs") or {}) != set(data.written_splits(wanted.get("val_size") or 0)):
        problems.append("the manifest does not list every split")
    return problems


def write_manifest(out_dir: Path, wanted: dict[str, Any], results: dict[str, SplitResult], paths: dict[str, Path]) -> None:
    from verl_p40 import __version__

    outputs = {split: {"rows": len(results[split].rows), "skipped": len(results[split].skipped),
                       "bytes": paths[split].stat().st_size, "sha256": _sha256(paths[split])} for split in paths}
    write_text(Path(out_dir) / MANIFEST, json.dumps({**wanted, "verl_p40": __version__, "outputs": outputs},
                                                     indent=2) + "\n")


def remove_stale_temps(out_dir: Path) -> list[Path]:
    """prep's own temporary files left by a killed run (`.train.parquet.*.tmp`, ...)."""
    stale = [p for name in (*(f"{s}.parquet" for s in data.written_splits(1)), MANIFEST) for p in Path(out_dir).glob(f".{name}.*.tmp")]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def changed_outputs(folder: Path) -> list[str]:
    """The parquet files in `folder` that differ from what prep wrote there (per its manifest; none without one)."""
    manifest = folder / MANIFEST
    try:
        outputs = json.loads(manifest.read_text(encoding="utf-8")).get("outputs") or {}
    except (OSError, ValueError):
        return []
    return [f"{split}.parquet: changed since verl-p40 prep wrote it ({MANIFEST})"
            for split, entry in outputs.items()
            if (folder / f"{split}.parquet").is_file() and _sha256(folder / f"{split}.parquet") != entry.get("sha256")]


def main(args) -> int:
    """CLI body of `verl-p40 prep` (argparse namespace from verl_p40.cli)."""
    out = Path(args.out)
    if out.is_dir():
        for stale in remove_stale_temps(out):
            print(f"removed {stale} (left by an interrupted prep)", file=sys.stderr)
    wanted = request(args.source, args.limit, args.skip_invalid, args.instruction, args.val_size)
    if args.skip_existing:
        problems = manifest_problems(out, wanted)
        if not problems:
            written = " and ".join(f"{split}.parquet" for split in data.written_splits(args.val_size))
            print(f"{args.out}: {written} are what this prep would write (--skip-existing)")
            return 0
        if any((out / f"{s}.parquet").exists() for s in data.SPLITS):
            print(f"{args.out}: preparing again: {'; '.join(problems)}", file=sys.stderr)
    started = time.perf_counter()
    results, paths = data.prepare(
        source=args.source,
        out_dir=args.out,
        limit=args.limit,
        skip_invalid=args.skip_invalid,
        instruction=args.instruction,
        cache_dir=args.cache_dir,
        progress=None if sys.stderr.isatty() else False,
        val_size=args.val_size,
    )
    write_manifest(out, wanted, results, paths)
    elapsed = time.perf_counter() - started
    summary: dict = {"source": args.source, "seconds": round(elapsed, 2), "splits": {}}
    for split, result in results.items():
        entry = {"rows": len(result.rows), "skipped": len(result.skipped), "file": str(paths[split])}
        if args.tokenizer:
            entry["prompt_tokens"] = data.prompt_token_stats(result.rows, args.tokenizer)
        summary["splits"][split] = entry
    for split, entry in summary["splits"].items():
        line = f"{split:>5}: {entry['rows']:>6} rows -> {entry['file']}"
        if entry["skipped"]:
            line += f"  ({entry['skipped']} invalid rows skipped)"
        if "prompt_tokens" in entry:
            t = entry["prompt_tokens"]
            line += f"  prompt tokens mean {t['mean']} p50 {t['p50']} p99 {t['p99']} max {t['max']}"
        print(line)
    for result in results.values():
        for reason in result.skipped[:5]:
            print(f"  skipped {reason}", file=sys.stderr)
    print(f"done in {elapsed:.2f} s")
    if args.summary_json:
        try:
            write_text(Path(args.summary_json), json.dumps(summary, indent=2) + "\n")
        except OSError as exc:
            raise UserError(f"--summary-json {args.summary_json}: cannot write it ({exc.strerror or exc})") from None
    return 0
