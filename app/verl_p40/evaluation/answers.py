"""eval's answers.jsonl: one line per question with every model's answer, its scores and the settings it was
generated with (each model's fingerprint, the dtype, max_new_tokens, the engine). It is appended per batch, so that a
rerun with the same --out continues where one stopped; a rerun continues only the answers of the same questions,
models and settings. Answers of another run (after more training `--compare latest` is another model) are never
mixed in, which would report one model's answers as another's: that file is kept under a new name and the
evaluation starts over.

A batch is appended whole or not at all: a write the disk refuses, or a stop, takes the batch's lines back out, and a
last line cut short by a kill is dropped before the next run appends."""

from __future__ import annotations

import json
import os
from pathlib import Path

from verl_p40 import UserError, reward
from verl_p40.atomic import write_whole

ANSWERS = "answers.jsonl"
FIX = "use another --out or remove it"
PHRASES = {
    "dtype": "answers generated in {old}, this run asks for {new}",
    "max_new_tokens": "answers of at most {old} new tokens, this run asks for {new}",
    "engine": "answers generated with the {old} engine, this run uses {new}",
}


def settings(models: dict[str, Path], dtype: str, max_new_tokens: int, engine: str) -> dict:
    """What decides the answers besides the questions."""
    from verl_p40.models.verify import fingerprint

    return {
        "models": {label: {"path": str(path), "fingerprint": fingerprint(path)} for label, path in models.items()},
        "dtype": dtype,
        "max_new_tokens": max_new_tokens,
        "engine": engine,
    }


def read(path: Path) -> dict[int, tuple[int, dict]]:
    """{question index: (line number, record)} of the answers file at `path` (none when there is none). A line that is
    not a record eval writes is named; a last line cut short (no newline, not JSON) is a write a kill interrupted,
    and is left out."""
    done: dict[int, tuple[int, dict]] = {}
    if not path.is_file():
        return done
    data = path.read_bytes()
    whole = data.rfind(b"\n") + 1  # a last line a kill cut short may end inside a character: it is left out below
    try:
        text = data[:whole].decode("utf-8") + data[whole:].decode("utf-8", errors="replace")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text; remove the line or the file to start over") from None
    lines = text.split("\n")
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if lineno == len(lines):  # no newline after it: cut short
                continue
            raise UserError(f"{path}:{lineno}: not valid JSON; remove the line or the file to start over") from None
        if not _is_answer(record):
            raise UserError(f"{path}:{lineno}: not an answer verl-p40 eval writes; {FIX}")
        done[record["index"]] = (lineno, record)
    return done


# what the report sums, per model: the answer's length and time, and the reward's parts (reward.score_parts)
NUMBERS = ("response_tokens", "seconds", *reward.score_parts("", "0"))


def _is_answer(record) -> bool:
    """A line as `evaluate._record` writes it: an index and, for each model, its answer and the numbers the report
    sums (a hand-edited or foreign line would stop the report half-way)."""
    index = record.get("index") if isinstance(record, dict) else None
    if isinstance(index, bool) or not isinstance(index, int):
        return False
    models = record.get("models")
    if not isinstance(models, dict) or not models:
        return False
    return all(
        isinstance(m, dict)
        and isinstance(m.get("answer"), str)
        and all(isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool) for k in NUMBERS)
        for m in models.values()
    )


def mismatch(path: Path, done: dict[int, tuple[int, dict]], questions: list, wanted: dict) -> str | None:
    """Why the answers at `path` are not answers of these questions with these settings; None when they are."""
    problem = _mismatch(path, done, questions, wanted)
    return problem.removesuffix(f"; {FIX}") if problem else None


def set_aside(path: Path) -> Path:
    """`path` renamed beside itself to a name no file has (answers-until-<its mtime>[-N].jsonl); the new name."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
    for n in range(1, 1000):
        target = path.with_name(f"{path.stem}-until-{stamp}{'' if n == 1 else f'-{n}'}{path.suffix}")
        if not target.exists() and not target.is_symlink():
            try:
                path.rename(target)
            except OSError as exc:
                raise UserError(
                    f"{path}: answers of another run, and it cannot be renamed ({exc.strerror}); {FIX}"
                ) from None
            return target
    raise UserError(f"{path}: answers of another run, and no free name beside it; {FIX}")


def _mismatch(path: Path, done: dict[int, tuple[int, dict]], questions: list, wanted: dict) -> str | None:
    by_index = {q.index: q for q in questions}
    for lineno, record in done.values():
        where = f"{path}:{lineno}"
        if set(record["models"]) != set(wanted["models"]):
            return f"{where}: written for other models ({sorted(record['models'])}); {FIX}"
        had = record.get("settings")
        if not isinstance(had, dict):
            return f"{where}: written by an older verl-p40 eval, which did not record its settings; {FIX}"
        for key, phrase in PHRASES.items():
            if had.get(key) != wanted[key]:
                return f"{where}: {phrase.format(old=had.get(key), new=wanted[key])}; {FIX}"
        for label, model in wanted["models"].items():
            old = (had.get("models") or {}).get(label) or {}
            if old.get("fingerprint") != model["fingerprint"]:
                return (
                    f"{where}: answers of another {label} model ({old.get('path')}), or its weights changed since; "
                    f"{FIX}"
                )
        question = by_index.get(record["index"])
        if question is not None and (
            record.get("question") != question.question
            or record.get("ground_truth") != question.ground_truth
            or record.get("prompt") != question.prompt[-1]["content"]
        ):
            return f"{where}: the answer to question {record['index']} is for another question (other --data?); {FIX}"
    return None


class Appender:
    """answers.jsonl opened to append whole batches (`with Appender(path) as add: add(lines)`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self):
        self.created = not os.path.lexists(self.path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        with open(self.path, "rb") as handle:
            text = handle.read()
        if text and not text.endswith(b"\n"):  # a last line without its newline
            last = text.rsplit(b"\n", 1)[-1]
            try:
                json.loads(last)  # complete (a newline lost to an editor): kept
                self._write(b"\n", len(text))
            except (ValueError, RecursionError):  # cut short by a kill (read() left it out): dropped
                os.ftruncate(self.fd, len(text) - len(last))
        return self.add

    def add(self, lines: list[str]) -> None:
        self._write("".join(lines).encode("utf-8"), os.lseek(self.fd, 0, os.SEEK_END))

    def _write(self, data: bytes, start: int) -> None:
        write_whole(self.fd, data, start)

    def __exit__(self, *exc) -> None:
        empty = os.fstat(self.fd).st_size == 0
        os.close(self.fd)
        if self.created and empty:  # not one answer written: no file either
            self.path.unlink(missing_ok=True)
