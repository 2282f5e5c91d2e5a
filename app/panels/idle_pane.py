"""Summary tab Idle: where each GPU stream's idle time went, one column per cause the engine reports
(host launch, sync, queued behind the host, other streams, peer ranks, ...), per rank, stream and
iteration, and the largest unexplained delays; double-click one to select the task that started late
on the timeline.

Numbers, cause names, labels and tooltips come from :mod:`lumos_core.replay.idle` (computed with the
job, off the GUI thread): a cause added to its ``CAUSE_INFO`` gets a column here without an edit.
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass

from PySide6.QtCore import QModelIndex, Signal
from PySide6.QtWidgets import QLabel, QWidget

from app.panels.table_model import Column, ns_as_ms, ns_as_us
from app.panels.table_pane import TablePane, note_above_tables
from app.view_model.loaded_job import LoadedJob
from lumos_core.api.views import CAUSE_INFO, Delay, IdleRow

_UNEXPLAINED_TIP = next(c.tip for c in CAUSE_INFO if c.name == "unexplained")

# One row of the causes table: rank, stream, iteration, idle_ns, then ``<cause>_ns`` for every cause
# of the engine in its order (a dataclass, so the CSV export has a column per cause too).
IdleCauseRow = dataclasses.make_dataclass(
    "IdleCauseRow",
    [("rank", int), ("stream", int), ("iteration", str), ("idle_ns", int)]
    + [(f"{c.name}_ns", int) for c in CAUSE_INFO],
    frozen=True,
)
IdleCauseRow.__module__ = __name__


@dataclass(frozen=True)
class DelayRow:
    rank: int
    rank_index: int
    stream: int
    start_ns: int
    length_ns: int
    task: str
    event: int


def _heading(label: str) -> str:
    """A cause's column heading on two short lines: at one line each, eight causes' headings (not
    their values, a few digits) made the table twice as wide as the window."""
    return textwrap.fill(f"{label} (ms)", 16)


def cause_rows(rows: list[IdleRow]) -> list[IdleCauseRow]:
    return [
        IdleCauseRow(r.rank, r.stream, r.iteration, r.idle_ns, *(r.causes[c.name] for c in CAUSE_INFO))
        for r in rows
    ]


def delay_rows(loaded: LoadedJob, delays: list[Delay], limit: int = 200) -> list[DelayRow]:
    index = {t.rank: i for i, t in enumerate(loaded.job.ranks)}
    return [
        DelayRow(d.rank, index.get(d.rank, -1), d.stream, d.start, d.length, d.task, d.event)
        for d in delays[:limit]
    ]


class IdlePane(QWidget):
    """Idle causes per rank/stream/iteration above, top unexplained delays below."""

    event_requested = Signal(int, int)  # rank index, event: select it on the timeline

    def __init__(self) -> None:
        super().__init__()
        self.note = QLabel()
        self.note.setWordWrap(True)
        cols = [
            Column("rank", lambda r: r.rank, numeric=True),
            Column("stream", lambda r: r.stream, numeric=True),
            Column("iteration", lambda r: r.iteration),
            Column("idle (ms)", lambda r: r.idle_ns, ns_as_ms, "window minus the stream's busy time", True),
        ]
        for c in CAUSE_INFO:
            cols.append(
                Column(_heading(c.label), lambda r, c=c: getattr(r, f"{c.name}_ns"), ns_as_ms, c.tip, True)
            )
        self.causes = TablePane("idle_causes", cols, IdleCauseRow)
        self.delays = TablePane(
            "unexplained_delays",
            [
                Column("rank", lambda r: r.rank, numeric=True),
                Column("stream", lambda r: r.stream, numeric=True),
                Column("at (ms)", lambda r: r.start_ns, ns_as_ms, "where the stream started waiting", True),
                Column("delay (µs)", lambda r: r.length_ns, ns_as_us, _UNEXPLAINED_TIP, True),
                Column("task that started late (double-click to select it)", lambda r: r.task),
            ],
            DelayRow,
        )
        self.delays.view.doubleClicked.connect(self._on_double_click)
        note_above_tables(self, self.note, self.causes, self.delays)
        self.loaded: LoadedJob | None = None

    def set_job(self, loaded: LoadedJob | None) -> None:
        self.loaded = loaded
        report = loaded.idle if loaded is not None else None
        if report is None:
            self.note.setText(f"No idle attribution: {loaded.idle_error}" if loaded is not None else "")
            self.causes.set_rows([])
            self.delays.set_rows([])
            return
        u = report.unexplained_summary()
        periodic = "; ".join(
            f"rank {p['rank']}: every {p['period_us'] / 1000:.3f} ms ({p['count']}×)" for p in u["periodic"]
        )
        self.note.setText(
            f"GPU idle time by cause (adds up to each stream's measured idle time; hover a column heading "
            f"for what its cause means). Unexplained delays: "
            f"{u['count']}, {u['total_us'] / 1000:.2f} ms in total"
            + (f"; periodic — {periodic}" if periodic else "; no periodic pattern")
        )
        self.causes.set_rows(cause_rows(report.rows), sort_column=3)
        self.delays.set_rows(delay_rows(loaded, report.delays), sort_column=3)

    def _on_double_click(self, index: QModelIndex) -> None:
        src = self.delays.proxy.mapToSource(index)
        if not src.isValid():
            return
        row: DelayRow = self.delays.model.rows[src.row()]
        if row.rank_index >= 0 and row.event >= 0:
            self.event_requested.emit(row.rank_index, row.event)
