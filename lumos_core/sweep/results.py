"""The results file of a grid sweep (CSV), written row by row so an interrupted sweep keeps what it
finished and a re-run resumes from it, and the table printed at the end.

One row per configuration: ``config`` (its changes as ``lumos estimate`` knobs, the resume key), one
column per knob of the grid, the world size, ``status`` (ok / out of memory / skipped), the predicted
iteration time and breakdown (ms), the change against the replayed baseline, tokens/s per GPU (empty
when the batch is unknown), the predicted peak memory per GPU and the GPU's capacity (bytes), and
``note`` (why a row was skipped or is out of memory, or why tokens/s is empty). A configuration
that does not fit in memory keeps its row and numbers; it is never on the Pareto front. Floats are written with
all their digits (``repr``).
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.replay.breakdown import Breakdown
from lumos_core.sweep.point import OK, OUT_OF_MEMORY, GridRow
from lumos_core.whatif.knobs import coerce_value

RESULT_COLUMNS = [
    "world_size",
    "status",
    "iteration_ms",
    "exposed_compute_ms",
    "overlapped_ms",
    "exposed_comm_ms",
    "other_ms",
    "change_pct",
    "tokens_per_s_per_gpu",
    "mfu",
    "peak_memory_bytes",
    "capacity_bytes",
    "note",
]
_BREAKDOWN_MS = ("exposed_compute_ms", "overlapped_ms", "exposed_comm_ms", "other_ms")


def columns_for(knobs: list[str]) -> list[str]:
    return ["config", *knobs, *RESULT_COLUMNS]


def _num(v: float) -> str:
    return "" if math.isnan(v) else repr(float(v))


def row_to_record(row: GridRow, knobs: list[str]) -> list[str]:
    b = row.breakdown
    parts = (
        [b.exposed_compute_ns / 1e6, b.overlapped_ns / 1e6, b.exposed_comm_ns / 1e6, b.other_ns / 1e6]
        if b is not None
        else [math.nan] * 4
    )
    return [
        row.key,
        *("" if row.changes.get(k) is None else str(row.changes[k]) for k in knobs),
        str(row.world_size),
        row.status,
        _num(row.iteration_us / 1000),
        *(_num(x) for x in parts),
        _num(row.change_pct),
        _num(row.tokens_per_s_per_gpu),
        _num(row.mfu),
        "" if row.peak_memory_bytes < 0 else str(row.peak_memory_bytes),
        "" if row.capacity_bytes < 0 else str(row.capacity_bytes),
        row.note,
    ]


def row_to_dict(row: GridRow, knobs: list[str]) -> dict[str, Any]:
    """The row as JSON-ready values (numbers as numbers, an unknown number as None)."""
    out: dict[str, Any] = {}
    for name, text in zip(columns_for(knobs), row_to_record(row, knobs)):
        if name in knobs:
            out[name] = row.changes.get(name)
        elif name == "world_size":
            out[name] = row.world_size
        elif name in ("peak_memory_bytes", "capacity_bytes"):
            out[name] = int(text) if text else None
        elif name in ("config", "status", "note"):
            out[name] = text
        else:
            out[name] = float(text) if text else None
    return out


def record_to_row(record: dict[str, str], knobs: list[str]) -> GridRow:
    def num(name: str) -> float:
        text = record.get(name, "")
        return float(text) if text else math.nan

    changes: dict[str, Any] = {k: coerce_value(k, record[k]) for k in knobs if record.get(k, "") != ""}
    breakdown = None
    if record["status"] in (OK, OUT_OF_MEMORY) and all(record.get(c) for c in _BREAKDOWN_MS):
        breakdown = Breakdown(*(round(float(record[c]) * 1e6) for c in _BREAKDOWN_MS))
    return GridRow(
        changes=changes,
        world_size=int(record["world_size"]),
        status=record["status"],
        iteration_us=num("iteration_ms") * 1000,
        breakdown=breakdown,
        change_pct=num("change_pct"),
        tokens_per_s_per_gpu=num("tokens_per_s_per_gpu"),
        mfu=num("mfu"),
        note=record.get("note", ""),
        peak_memory_bytes=int(record.get("peak_memory_bytes") or -1),
        capacity_bytes=int(record.get("capacity_bytes") or -1),
    )


class ResultsFile:
    """A results CSV opened for a sweep of ``knobs``: :attr:`done` holds the rows already in it (by
    configuration key); :meth:`append` adds a row and flushes it to disk at once."""

    def __init__(self, path: str | Path, knobs: list[str], restart: bool = False) -> None:
        self.path = Path(path)
        self.knobs = list(knobs)
        self.columns = columns_for(self.knobs)
        self.done: dict[str, GridRow] = {}
        if restart or not self.path.exists() or self.path.stat().st_size == 0:
            self._fh = self._create()
        else:
            self._read_existing()
            self._fh = self.path.open("a", newline="", encoding="utf-8")

    def _create(self) -> io.TextIOWrapper:
        if self.path.parent and not self.path.parent.exists():
            raise ConfigError(f"{self.path}: folder {self.path.parent} does not exist")
        fh = self.path.open("w", newline="", encoding="utf-8")
        csv.writer(fh).writerow(self.columns)
        fh.flush()
        return fh

    def _read_existing(self) -> None:
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):  # the last row was cut by a hard stop: drop that partial row
            keep = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(keep)
            data = data[:keep]
        reader = csv.reader(io.StringIO(data.decode("utf-8")))
        header = next(reader, None)
        if header != self.columns:
            raise ConfigError(
                f"{self.path} holds the results of another sweep (columns {', '.join(header or [])}); "
                "resume it with the same grid, choose another --out, or start again with --restart"
            )
        for values in reader:
            if len(values) != len(self.columns):
                continue
            record = dict(zip(self.columns, values))
            try:
                row = record_to_row(record, self.knobs)
            except (ValueError, ConfigError):
                continue  # a damaged row: estimated again
            self.done[record["config"]] = row

    def rows_on_disk(self) -> int:
        """Complete rows in the file now (what an interrupted sweep kept, even when the interrupt
        came between a row's write and its bookkeeping), also once the file is closed."""
        if not self._fh.closed:
            self._fh.flush()
        data = self.path.read_bytes()
        data = data[: data.rfind(b"\n") + 1]
        return max(sum(1 for _ in csv.reader(io.StringIO(data.decode("utf-8")))) - 1, 0)

    def append(self, row: GridRow) -> None:
        csv.writer(self._fh).writerow(row_to_record(row, self.knobs))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done[row.key] = row

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fmt(v: float, spec: str) -> str:
    return "-" if math.isnan(v) else format(v, spec)


def format_table(rows: list[GridRow], knobs: list[str]) -> str:
    """An aligned text table of ``rows`` (the CLI's output)."""
    header = [
        *knobs,
        "GPUs",
        "iter ms",
        "compute",
        "overlap",
        "comm",
        "other",
        "vs base",
        "tok/s/GPU",
        "MFU",
        "mem GiB",
        "note",
    ]
    lines = [header]
    for r in rows:
        b = r.breakdown
        parts = (
            [b.exposed_compute_ns / 1e6, b.overlapped_ns / 1e6, b.exposed_comm_ns / 1e6, b.other_ns / 1e6]
            if b is not None
            else [math.nan] * 4
        )
        lines.append(
            [
                *(str(r.changes.get(k, "")) for k in knobs),
                str(r.world_size),
                _fmt(r.iteration_us / 1000, ".3f"),
                *(_fmt(x, ".3f") for x in parts),
                _fmt(r.change_pct, "+.1f") + ("%" if r.estimated else ""),
                _fmt(r.tokens_per_s_per_gpu, ",.0f"),
                _fmt(100 * r.mfu, ".1f") + ("%" if r.mfu == r.mfu else ""),
                "-" if r.peak_memory_bytes < 0 else f"{r.peak_memory_bytes / 2**30:,.1f}",
                "" if r.ok else r.note,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        cells = [c.rjust(w) if i >= len(knobs) else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells) + ("  " + line[-1] if line[-1] else ""))
    return "\n".join(out)


def pareto_front(rows: list[GridRow], by: str = "time") -> list[int]:
    """Indices of the estimated rows that no other beats on both GPUs and iteration time (fewer or
    as many GPUs and less or as much time, one of them strictly), by increasing GPUs. Rows that do
    not fit in memory (status "out of memory") are no candidates: they are no answer.

    ``by="throughput"``: on the job's throughput (tokens/s, all GPUs) instead, for grids whose
    configurations do different work per iteration (their iteration times do not compare); rows
    without a known rate are then no candidates."""
    if by == "throughput":
        key = [-r.tokens_per_s_per_gpu * r.world_size for r in rows]  # higher rate: lower key
    else:
        key = [r.iteration_us for r in rows]
    ok = sorted((r.world_size, key[i], i) for i, r in enumerate(rows) if r.ok and not math.isnan(key[i]))
    front: list[int] = []
    best = math.inf
    for _gpus, t, i in ok:
        if t < best:  # faster than everything with fewer GPUs (and the fastest at these GPUs)
            front.append(i)
            best = t
    return front
