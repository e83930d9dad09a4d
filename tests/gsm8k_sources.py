"""Small GSM8K sources for tests: the first rows of the real files, in the openai/grade-school-math layout."""

from __future__ import annotations

from pathlib import Path

SPLITS = ("train", "test")


def small_source(gsm8k_dir: Path, folder: Path, rows: int = 40) -> Path:
    """`folder` with train.jsonl and test.jsonl holding the first `rows` rows of each real split."""
    folder.mkdir()
    for split in SPLITS:
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:rows]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return folder
