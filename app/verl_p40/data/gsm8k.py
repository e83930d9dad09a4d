"""GSM8K -> verl 0.5.0's RL parquet schema (what `verl.utils.dataset.rl_dataset.RLHFDataset` reads).

A source is one of
- a folder with `train.jsonl` / `test.jsonl` in the openai/grade-school-math format;
- a folder with the Hugging Face parquet export (`question`, `answer` columns), as `train.parquet`,
  `train-00000-of-00001.parquet` or `main/train-00000-of-00001.parquet` (and the same for `test`);
- `hf:openai/gsm8k` (or `hf:<repo>`), loaded with `datasets`, which honours `HF_ENDPOINT` and `HF_HUB_OFFLINE`.

Every row is validated; a bad row stops the run with `FILE:LINE: reason` (or is skipped with `skip_invalid`), also
a row no GSM8K file holds (JSON nested thousands deep, a lone surrogate escape such as "\ud800", a key given twice, a
line of megabytes), and the parquet files appear only when all are complete, with the manifest after them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_p40 import UserError, defaults
from verl_p40.data.manifest import MANIFEST, manifest_text, output_folder, request
from verl_p40.reward import ANSWER_RE

DATA_SOURCE = "openai/gsm8k"
ABILITY = "math"
DEFAULT_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = ("train", "test")
MAX_LINE_BYTES = 2**20  # a GSM8K row is under 2 KB; a line of megabytes is not a row (a file that is not JSONL)


class InvalidRow(UserError):
    """A source row that cannot become a training example."""


@dataclass(frozen=True)
class RawRow:
    where: str  # "FILE:LINE" (jsonl) or "FILE:ROW" (parquet, 1-based) or "hf:REPO[split]:ROW"
    record: Any  # the parsed object, or an InvalidRow for a line that did not parse


@dataclass
class SplitResult:
    rows: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "where: reason"


def ground_truth(answer: str) -> str:
    """The number after `#### ` with thousands separators removed; raises ValueError when there is none."""
    match = ANSWER_RE.search(answer)
    if match is None or not any(ch.isdigit() for ch in match.group(1)):
        raise ValueError('answer has no numeric final answer after "#### "')
    return match.group(1).replace(",", "")


def make_row(question: str, answer: str, split: str, index: int, instruction: str = DEFAULT_INSTRUCTION) -> dict:
    """One example in verl's RL schema (the layout of verl's examples/data_preprocess/gsm8k.py)."""
    content = f"{question} {instruction}" if instruction else question
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": content}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": ground_truth(answer)},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def _validate(record: Any) -> tuple[str, str]:
    if isinstance(record, InvalidRow):
        raise record
    if not isinstance(record, dict):
        raise InvalidRow(f"expected a JSON object, got {type(record).__name__}")
    for key in ("question", "answer"):
        if key not in record or record[key] is None:
            raise InvalidRow(f"missing field {key!r}")
        if not isinstance(record[key], str) or not record[key].strip():
            raise InvalidRow(f"field {key!r} must be a non-empty string")
        try:
            record[key].encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's "\ud800": a half of a surrogate pair, which no text holds
            raise InvalidRow(
                f"field {key!r} holds an invalid Unicode escape (a lone surrogate \\u{ord(record[key][exc.start]):04x}"
                f" at character {exc.start + 1})"
            ) from None
    return record["question"], record["answer"]


# ---------------------------------------------------------------------------------------------- readers


class _DuplicateKey(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object whose keys are all different: with a key given twice, which value is meant is anyone's guess."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


def _parse(raw: bytes, first: bool) -> Any:
    """One JSONL line as its object, or the InvalidRow that says why it is none."""
    if first and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (Windows editors write one): skipped
        raw = raw[3:]
    if first and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return InvalidRow("UTF-16 text (it starts with a UTF-16 byte-order mark); save the file as UTF-8")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return InvalidRow(f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
    if not line.strip():
        return None
    try:
        return json.loads(line, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        return InvalidRow(f"not valid JSON ({exc.msg} at column {exc.colno})")
    except RecursionError:
        return InvalidRow("not valid JSON for a row (nested too deeply)")
    except _DuplicateKey as exc:
        return InvalidRow(f"key {exc.args[0]!r} is given twice")


def _read_jsonl(path: Path) -> Iterator[RawRow]:
    # Bytes, read line by line: a line that is not UTF-8 is one invalid row (named), not a crash of the whole file; a
    # line longer than MAX_LINE_BYTES is one invalid row, read past without holding it. CRLF files read like LF files.
    with open(path, "rb") as handle:
        lineno = 0
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):
                    raw = handle.readline(MAX_LINE_BYTES)
                    size += len(raw)
                record: Any = InvalidRow(f"a line of {size} bytes, not a GSM8K row (is this a JSONL file?)")
            else:
                record = _parse(raw, lineno == 1)
            if record is not None:
                yield RawRow(f"{path}:{lineno}", record)


def _read_parquet(paths: list[Path]) -> Iterator[RawRow]:
    import pyarrow.parquet as pq

    for path in paths:
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for unreadable files
            raise UserError(f"{path}: not a readable parquet file ({exc})") from None
        missing = {"question", "answer"} - set(table.column_names)
        if missing:
            raise UserError(f"{path}: parquet lacks column(s) {', '.join(sorted(missing))}")
        for rowno, record in enumerate(table.select(["question", "answer"]).to_pylist(), start=1):
            yield RawRow(f"{path}:{rowno}", record)


def _parquet_shards(folder: Path, split: str) -> list[Path]:
    for pattern in (f"{split}.parquet", f"{split}-*.parquet", f"main/{split}.parquet", f"main/{split}-*.parquet"):
        found = sorted(folder.glob(pattern))
        if found:
            return found
    return []


def holds_a_source(folder: Path) -> bool:
    """Whether `folder` holds GSM8K as published (train.jsonl, or the hub's parquet export), which prep reads with
    --source, rather than a folder prep wrote."""
    if (folder / "train.jsonl").is_file():
        return True
    return any(path != folder / "train.parquet" for path in _parquet_shards(folder, "train"))


def _read_hub(repo: str, cache_dir: str | None) -> dict[str, Iterable[RawRow]]:
    try:
        import datasets
    except ImportError:
        raise UserError("reading from the hub needs the 'datasets' package: pip install 'verl-p40[hub]'") from None
    try:
        loaded = datasets.load_dataset(repo, "main", cache_dir=cache_dir)
    except Exception as exc:
        raise UserError(
            f"could not load {repo} from the Hugging Face hub ({type(exc).__name__}: {exc}). "
            "Offline? Point --source at a local folder, or set HF_ENDPOINT to a mirror."
        ) from None

    def rows(split: str) -> Iterator[RawRow]:
        for rowno, record in enumerate(loaded[split], start=1):
            yield RawRow(f"hf:{repo}[{split}]:{rowno}", record)

    missing = [split for split in SPLITS if split not in loaded]
    if missing:
        raise UserError(f"hf:{repo} has no split(s) {', '.join(missing)}")
    return {split: rows(split) for split in SPLITS}


def open_source(source: str, cache_dir: str | None = None) -> dict[str, Iterable[RawRow]]:
    """Map each split to its raw rows, whatever the source format."""
    if source.startswith("hf:"):
        return _read_hub(source[3:], cache_dir)
    folder = Path(source)
    if not folder.is_dir():
        raise UserError(f"{source}: not a folder (expected train.jsonl/test.jsonl, parquet files, or hf:openai/gsm8k)")
    out: dict[str, Iterable[RawRow]] = {}
    for split in SPLITS:
        jsonl = folder / f"{split}.jsonl"
        shards = _parquet_shards(folder, split)
        if jsonl.is_file():
            out[split] = _read_jsonl(jsonl)
        elif shards:
            out[split] = _read_parquet(shards)
        else:
            raise UserError(f"{folder}: no {split}.jsonl and no {split} parquet file")
    return out


# ---------------------------------------------------------------------------------------------- convert


def convert_split(
    raw: Iterable[RawRow], split: str, instruction: str, limit: int | None, skip_invalid: bool
) -> SplitResult:
    result = SplitResult()
    for item in raw:
        if limit is not None and len(result.rows) >= limit:
            break
        try:
            question, answer = _validate(item.record)
            result.rows.append(make_row(question, answer, split, len(result.rows), instruction))
        except (InvalidRow, ValueError) as exc:
            if not skip_invalid:
                raise InvalidRow(f"{item.where}: {exc}") from None
            result.skipped.append(f"{item.where}: {exc}")
    return result


VAL_SEED = 0  # the validation slice is the same rows on every run of prep


DEFAULT_VAL_ROWS = int(defaults.VAL_SIZE.value)  # prep's slice when none is asked for (256)
DEFAULT_VAL_FROM = defaults.VAL_FROM_TRAIN * DEFAULT_VAL_ROWS  # train rows the default slice needs (1,024)
# GSM8K's train split as its authors publish it (openai/grade-school-math; tests/fixtures/gsm8k/SOURCE.md), which
# tests/unit_data/test_data.py counts in the committed copy; one epoch of a default run is what prep then leaves in
# train.parquet with its default validation slice held out: 7,473 - 256 = 7,217 questions.
TRAIN_ROWS = 7473
EPOCH_ROWS = TRAIN_ROWS - DEFAULT_VAL_ROWS


@dataclass(frozen=True)
class ValSlice:
    """Prep's validation slice, decided once (`of`) from `--val-size` and the train split's rows, then handed on: the
    rows held out as val.parquet, the files prep writes, and which earlier request wrote the same files."""

    asked: int | None  # --val-size (VAL_SIZE); None: the default
    rows: int  # train rows held out as val.parquet (0: none)

    @classmethod
    def of(cls, asked: int | None, train_rows: int) -> ValSlice:
        """`--val-size` where given; by default DEFAULT_VAL_ROWS (the trainer then validates and keeps its best step)
        where the train split has DEFAULT_VAL_FROM rows (GSM8K's 7,473 has), else none (a trial's `--limit` or a small
        set's rows all train)."""
        if asked is not None:
            return cls(asked, asked)
        return cls(None, DEFAULT_VAL_ROWS if train_rows >= DEFAULT_VAL_FROM else 0)

    @property
    def splits(self) -> tuple[str, ...]:
        return written_splits(self.rows)

    def same(self) -> dict[str, int]:
        """The request that writes the same files: the default's size asked for by number (an earlier compose's
        VAL_SIZE=256)."""
        return {"val_size": self.rows} if self.asked is None else {}


def written_splits(val_size: int) -> tuple[str, ...]:
    """The parquet files prep writes: train and test, and val between them when a validation slice is asked for."""
    return ("train", "val", "test") if val_size else SPLITS


def carve_validation(train: SplitResult, size: int) -> tuple[SplitResult, SplitResult]:
    """(train without them, val): `size` rows of the train split drawn at random (seed VAL_SEED), for the trainer's
    validation and for choosing settings, so that the test split stays unseen until the final evaluation."""
    import random

    if size >= len(train.rows):
        raise UserError(
            f"--val-size {size}: the train split has only {len(train.rows)} rows; take fewer (--val-size 0: no "
            "validation slice; the trainer then does not validate)"
        )
    picked = set(random.Random(VAL_SEED).sample(range(len(train.rows)), size))
    val = [
        {**row, "extra_info": {**row["extra_info"], "split": "val"}} for i, row in enumerate(train.rows) if i in picked
    ]
    rest = [row for i, row in enumerate(train.rows) if i not in picked]
    return SplitResult(rows=rest, skipped=train.skipped), SplitResult(rows=val)


def _arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [("split", pa.string()), ("index", pa.int64()), ("question", pa.string()), ("answer", pa.string())]
                ),
            ),
        ]
    )


def write_table(result: SplitResult, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(result.rows, schema=_arrow_schema()), path)


def prepare(
    source: str,
    out_dir: str | Path,
    limit: int | None = None,
    skip_invalid: bool = False,
    instruction: str = DEFAULT_INSTRUCTION,
    cache_dir: str | None = None,
    progress: bool | None = None,
    val_size: int | None = None,
) -> tuple[dict[str, SplitResult], dict[str, Path]]:
    """Convert every split of `source` and write the parquet files into `out_dir` (with val.parquet: the `ValSlice`
    of `val_size`, `--val-size`, and the train split's rows)."""
    from tqdm import tqdm

    out = Path(out_dir)
    if not source.startswith("hf:") and Path(source).is_dir() and out.resolve() == Path(source).resolve():
        raise UserError(f"--out {out} is the --source folder: prep would overwrite its input; choose another --out")
    folder = output_folder(out)
    folder.check([f"{split}.parquet" for split in written_splits(1)] + [MANIFEST])  # before any work: may they go
    wanted = request(source, limit, skip_invalid, instruction, val_size)
    raw = open_source(source, cache_dir)
    results = {}
    for split in SPLITS:
        rows = tqdm(raw[split], desc=f"prep {split}", unit="row", disable=not progress, leave=False)
        results[split] = convert_split(rows, split, instruction, limit, skip_invalid)
        if not results[split].rows:
            raise UserError(f"{source}: split {split!r} has no valid rows")
    val = ValSlice.of(val_size, len(results["train"].rows))
    if val.rows:
        results["train"], results["val"] = carve_validation(results["train"], val.rows)
    elif val.asked is None:
        print(
            f"no val.parquet: the train split's {len(results['train'].rows)} rows are under the "
            f"{DEFAULT_VAL_FROM} that the default's {DEFAULT_VAL_ROWS} are held out of (--val-size N: N)"
        )
    splits = val.splits
    names = [f"{split}.parquet" for split in splits] + [MANIFEST]
    results = {split: results[split] for split in splits}
    with folder.write(names) as temps:  # the manifest is renamed into place last, once every parquet file is
        for split, temp in zip(splits, temps):
            write_table(results[split], temp)
        temps[-1].write_text(manifest_text(wanted, results, dict(zip(splits, temps))), encoding="utf-8")
    if not val.rows and folder.remove("val.parquet"):  # an earlier prep's slice: its rows are back in train.parquet
        print(f"removed {out / 'val.parquet'} (an earlier prep's validation slice; this one has none)")
    return results, {split: out / f"{split}.parquet" for split in splits}
