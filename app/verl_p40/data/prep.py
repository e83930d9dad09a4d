"""`verl-p40 prep`: GSM8K to verl's parquet (`verl_p40.data.gsm8k` converts), with a manifest (`verl_p40.data.manifest`,
beside the parquet files) of what the output was made from and what was written, so `prep --skip-existing` skips
only when the files are exactly what this prep would write."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from verl_p40 import UserError
from verl_p40.atomic import write_text
from verl_p40.data import gsm8k
from verl_p40.data.manifest import MANIFEST, manifest_problems, request, write_manifest


def remove_stale_temps(out_dir: Path) -> list[Path]:
    """prep's own temporary files left by a killed run (`.train.parquet.*.tmp`, ...)."""
    stale = [
        p
        for name in (*(f"{s}.parquet" for s in gsm8k.written_splits(1)), MANIFEST)
        for p in Path(out_dir).glob(f".{name}.*.tmp")
    ]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def main(args) -> int:
    """CLI body of `verl-p40 prep` (argparse namespace from verl_p40.cli)."""
    out = Path(args.out)
    if out.is_dir():
        for stale in remove_stale_temps(out):
            print(f"removed {stale} (left by an interrupted prep)", file=sys.stderr)
    wanted = request(args.source, args.limit, args.skip_invalid, args.instruction, args.val_size)
    if args.skip_existing:
        problems = manifest_problems(out, wanted, gsm8k.written_splits(args.val_size))
        if not problems:
            written = " and ".join(f"{split}.parquet" for split in gsm8k.written_splits(args.val_size))
            print(f"{args.out}: {written} are what this prep would write (--skip-existing)")
            return 0
        if any((out / f"{s}.parquet").exists() for s in gsm8k.SPLITS):
            print(f"{args.out}: preparing again: {'; '.join(problems)}", file=sys.stderr)
    started = time.perf_counter()
    results, paths = gsm8k.prepare(
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
            entry["prompt_tokens"] = gsm8k.prompt_token_stats(result.rows, args.tokenizer)
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
