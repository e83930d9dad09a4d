"""The monitor's CSV files: appended under one header, rotated by size, read back for summaries and plots."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path

from verl_p40.gpu.nvml import GPU_COLUMNS, GPUSample, ProcessSample


class CsvLog:
    """Appends rows under one header; starts a new file when the header differs or the size passes `max_bytes`
    (the old file becomes NAME.1, NAME.2, ... keeping `keep` of them)."""

    def __init__(self, path: Path, columns: list[str], max_bytes: int = 50 * 2**20, keep: int = 3):
        self.path, self.columns, self.max_bytes, self.keep = Path(path), columns, max_bytes, keep
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self._header() != columns:
            self._rotate()

    def _header(self) -> list[str] | None:
        with open(self.path, newline="") as handle:
            return next(csv.reader(handle), None)

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def write(self, rows: Iterable) -> None:
        rows = list(rows)
        if not rows:
            return
        if self.path.exists() and self.path.stat().st_size >= self.max_bytes:
            self._rotate()
        new = not self.path.exists() or self.path.stat().st_size == 0
        with open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(self.columns)
            for row in rows:
                values = asdict(row)
                writer.writerow(["" if values[c] is None else values[c] for c in self.columns])
            handle.flush()


def read_gpu_csv(path: str | Path) -> list[GPUSample]:
    numeric = {f.name for f in fields(GPUSample)} - {"name", "throttle_reasons"}
    out = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            values: dict = {}
            for key, value in row.items():
                if key not in GPU_COLUMNS:
                    continue
                if value == "":
                    values[key] = None
                elif key in numeric:
                    values[key] = (
                        int(float(value)) if key in ("gpu", "memory_used_bytes", "memory_total_bytes") else float(value)
                    )
                else:
                    values[key] = value
            out.append(GPUSample(**values))
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
