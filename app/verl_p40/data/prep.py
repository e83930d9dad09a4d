"""`verl-p40 prep`: GSM8K to verl's parquet (`verl_p40.data.gsm8k` converts), with a manifest (`verl_p40.data.manifest`,
beside the parquet files) of what the output was made from and what was written, so `prep --skip-existing` skips
only when the files are exactly what this prep would write."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from verl_p40.data import gsm8k, token_stats
from verl_p40.data.manifest import MANIFEST, manifest_problems, manifest_train_rows, output_folder, request
from verl_p40.data.options import PrepOptions
from verl_p40.outputs import OutputFolder


def main(options: PrepOptions) -> int:
    """`verl-p40 prep`, with the options the command line built (taken whole, never changed)."""
    folder = output_folder(Path(options.out))
    with folder.writer():  # one prep per folder: a second is refused, never removes the first one's temporaries
        return _prep(options, folder)


def _prep(options: PrepOptions, folder: OutputFolder) -> int:
    out = folder.folder
    names = [*(f"{s}.parquet" for s in gsm8k.written_splits(1)), MANIFEST]
    for stale in folder.remove_stale_temps(names):
        print(f"removed {stale} (left by an interrupted prep)", file=sys.stderr)
    summary_json = Path(options.summary_json) if options.summary_json else None
    if summary_json:  # checked before any work
        OutputFolder(summary_json.parent, "--summary-json", "prep").check([summary_json.name])
    if options.skip_existing:
        wanted = request(options.source, options.limit, options.skip_invalid, options.instruction, options.val_size)
        # the slice as the train rows the manifest lists decide it (prep would convert the same rows)
        val = gsm8k.ValSlice.of(options.val_size, manifest_train_rows(out))
        problems = manifest_problems(out, wanted, val.splits, val.same())
        if not problems:
            written = " and ".join(f"{split}.parquet" for split in val.splits)
            print(f"{options.out}: {written} are what this prep would write (--skip-existing)")
            return 0
        if any((out / f"{s}.parquet").exists() for s in gsm8k.SPLITS):
            print(f"{options.out}: preparing again: {'; '.join(problems)}", file=sys.stderr)
    # the tokenizer is loaded before anything is written
    tokenizer = token_stats.load_tokenizer(options.tokenizer) if options.tokenizer else None
    started = time.perf_counter()
    results, paths = gsm8k.prepare(
        source=options.source,
        out_dir=options.out,
        limit=options.limit,
        skip_invalid=options.skip_invalid,
        instruction=options.instruction,
        cache_dir=options.cache_dir,
        progress=None if sys.stderr.isatty() else False,
        val_size=options.val_size,
    )
    elapsed = time.perf_counter() - started
    summary: dict = {"source": options.source, "seconds": round(elapsed, 2), "splits": {}}
    for split, result in results.items():
        entry = {"rows": len(result.rows), "skipped": len(result.skipped), "file": str(paths[split])}
        if tokenizer is not None:
            entry["prompt_tokens"] = token_stats.prompt_token_stats(result.rows, tokenizer)
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
    if summary_json:
        with OutputFolder(summary_json.parent, "--summary-json", "prep").write([summary_json.name]) as (temp,):
            temp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0
