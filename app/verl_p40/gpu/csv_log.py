"""The monitor's CSV files: appended under one header, rotated by size, read back for summaries and plots. Written
through the monitor's output folder (`verl_p40.outputs`): each batch of rows lands whole or not at all, and only a
file the monitor wrote there is added to or rotated."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path

from verl_p40.gpu.sampler import GPU_COLUMNS, GPUSample, ProcessSample
from verl_p40.outputs import OutputFolder


def rotated(name: str, keep: int) -> list[str]:
    """`name` and the names its older parts are rotated to."""
    return [name, *(f"{name}.{i}" for i in range(1, keep + 1))]


def header(path: Path) -> list[str] | None:
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        return next(csv.reader([handle.readline(1 << 16)]), None)


class CsvLog:
    """Appends rows to `folder`'s `name` under one header; starts a new file when the header differs or the size
    passes `max_bytes` (the old file becomes NAME.1, NAME.2, ... keeping `keep` of them)."""

    def __init__(self, folder: OutputFolder, name: str, columns: list[str], max_bytes: int = 50 * 2**20, keep: int = 3):
        self.folder, self.name, self.columns, self.max_bytes, self.keep = folder, name, columns, max_bytes, keep
        self.path = folder.folder / name
        folder.check(rotated(name, keep))  # a user's file of one of its names, or a link: refused before a row
        if self.path.exists() and header(self.path) != columns:
            self._rotate()

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            if (self.path.with_name(f"{self.name}.{i}")).exists():
                self.folder.rename(f"{self.name}.{i}", f"{self.name}.{i + 1}")
        self.folder.rename(self.name, f"{self.name}.1")

    def write(self, rows: Iterable) -> None:
        rows = list(rows)
        if not rows:
            return
        if self.path.exists() and self.path.stat().st_size >= self.max_bytes:
            self._rotate()
        with self.folder.append(self.name) as add:
            text = io.StringIO()
            writer = csv.writer(text)
            if self.path.stat().st_size == 0:
                writer.writerow(self.columns)
            for row in rows:
                values = asdict(row)
                writer.writerow(["" if values[c] is None else values[c] for c in self.columns])
            add(text.getvalue().encode("utf-8"))


def read_gpu_csv(path: str | Path) -> list[GPUSample]:
    numeric = {f.name for f in fields(GPUSample)} - {"name", "throttle_reasons"}
    out = []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            values: dict = {}
            try:
                for key, value in row.items():
                    if key not in GPU_COLUMNS:
                        continue
                    if value == "":
                        values[key] = None
                    elif key in numeric:
                        whole = key in ("gpu", "memory_used_bytes", "memory_total_bytes")
                        values[key] = int(float(value)) if whole else float(value)
                    else:
                        values[key] = value
                out.append(GPUSample(**values))
            except (TypeError, ValueError) as exc:  # the line a reader must look at, not only what was wrong
                raise type(exc)(f"line {reader.line_num}: {exc}") from None
    return out


def read_process_csv(path: str | Path) -> list[ProcessSample]:
    with open(path, newline="") as handle:
        return [
            ProcessSample(
                ts=float(row["ts"]),
                gpu=int(row["gpu"]),
                pid=int(row["pid"]),
                name=row["name"],
                used_memory_bytes=int(row["used_memory_bytes"]) if row["used_memory_bytes"] else None,
            )
            for row in csv.DictReader(handle)
        ]
