"""Is a prepared data folder still what verl's trainer can read? Each split's parquet readable, in verl's RL schema,
not empty, and the files prep wrote (its manifest). Reads only the parquet footers: the doctor's data check and
the preflight of `train` ask it, never the converter.
"""

from __future__ import annotations

from pathlib import Path

from verl_p40.data.gsm8k import SPLITS
from verl_p40.data.manifest import changed_outputs

REQUIRED_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def parquet_problem(path: Path) -> tuple[str, int]:
    """(what is wrong with `path` as a file verl's trainer reads, "" when nothing; its rows). Reads only the footer."""
    import pyarrow.parquet as pq

    if not path.is_file():
        return "missing", 0
    try:
        meta = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for unreadable files
        return f"not a readable parquet file ({str(exc).splitlines()[0]})", 0
    missing = [c for c in REQUIRED_COLUMNS if c not in meta.schema_arrow.names]
    if missing:
        return f"not in verl's RL schema (no column {', '.join(missing)})", 0
    if meta.metadata.num_rows == 0:
        return "no rows", 0
    return "", meta.metadata.num_rows


def folder_problems(folder: Path) -> tuple[list[str], dict[str, int]]:
    """(problems, {split: rows}) of a prepared data folder: each split's parquet readable, in verl's RL schema, not
    empty. Reads only the parquet footers."""
    problems, rows = [], {}
    for split in (*SPLITS, *(["val"] if (Path(folder) / "val.parquet").exists() else [])):
        path = Path(folder) / f"{split}.parquet"
        problem, count = parquet_problem(path)
        if problem:
            problems.append(f"{path.name}: {problem}")
        else:
            rows[split] = count
    if not problems:  # what prep wrote: the files must still be those
        problems = changed_outputs(Path(folder))
    return problems, rows
