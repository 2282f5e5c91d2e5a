"""Summary tab Stragglers: the ranks with evidence of being slower than their peers, the reason first
(compute or host, by how much, at which collectives), then the figures behind it; double-click a row
to scroll the timeline to that rank.

Detection is :func:`lumos_core.replay.stragglers.find_stragglers` (significance against the job's
own iteration and arrival spread), run with the job off the GUI thread; the same flagged ranks get a
red tick in the timeline's overview strip. Ranks late now and then but within what the others show
are listed below the flagged ones, greyed by their "no".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import QModelIndex, Signal
from PySide6.QtWidgets import QLabel, QWidget

from app.panels.table_model import Column, ns_as_us
from app.panels.table_pane import TablePane, note_above_tables
from app.view_model.loaded_job import LoadedJob


@dataclass(frozen=True)
class StragglerRow:
    reason: str
    rank: int
    rank_index: int
    flagged: str
    slowdown: float  # kernels slower than on peers, % (NaN: unknown)
    late: str  # "n of m"
    n_late: int
    mean_late_ns: float
    max_late_ns: int
    p_value: float
    iteration_late_ns: int
    collectives: str  # the latest collectives: kind, group, lateness


def straggler_rows(loaded: LoadedJob) -> list[StragglerRow]:
    """The flagged ranks, then the others that were late at some collective (every punctual rank of a
    512-rank job says nothing)."""
    rep = loaded.stragglers
    if rep is None:
        return []
    rows = []
    for r in [*rep.flagged, *(r for r in rep.ranks if not r.flagged and r.n_late)]:
        where = ", ".join(f"{c.kind} #{c.instance} [{c.group}] +{c.late_ns / 1e3:,.0f} µs" for c in r.worst)
        rows.append(
            StragglerRow(
                r.reason,
                r.rank,
                r.rank_index,
                "yes" if r.flagged else "no",
                100 * r.slowdown,
                f"{r.n_late} of {r.n_collectives}",
                r.n_late,
                r.mean_late_ns,
                r.max_late_ns,
                r.p_value,
                r.iteration_late_ns,
                where,
            )
        )
    return rows


def _pct(v: float) -> str:
    return "" if math.isnan(v) else f"{v:+.1f}"


class StragglerPane(QWidget):
    """The note (the tests and the job's spread) above the table of stragglers."""

    rank_requested = Signal(int)  # rank index: scroll the timeline to it

    def __init__(self) -> None:
        super().__init__()
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.table = TablePane(
            "stragglers",
            [
                Column("reason (double-click: go to the rank)", lambda r: r.reason, max_px=300),
                Column("rank", lambda r: r.rank, numeric=True),
                Column("straggler", lambda r: r.flagged, tooltip="flagged on significant evidence"),
                Column(
                    "kernels vs peers (%)",
                    lambda r: r.slowdown,
                    _pct,
                    "its compute kernels' time beside the same kernels on its peers",
                    True,
                ),
                Column(
                    "late at",
                    lambda r: r.late,
                    tooltip="collectives it arrived late at by its own doing, of those it joined",
                ),
                Column("mean late (µs)", lambda r: r.mean_late_ns, ns_as_us, "after the other members", True),
                Column("max late (µs)", lambda r: r.max_late_ns, ns_as_us, "after the other members", True),
                Column(
                    "p",
                    lambda r: r.p_value,
                    lambda v: f"{v:.2g}",
                    "the tests' p value (before Bonferroni)",
                    True,
                ),
                Column(
                    "iteration excess (µs)",
                    lambda r: r.iteration_late_ns,
                    ns_as_us,
                    "longest iteration minus that iteration's median over its peers",
                    True,
                ),
                Column("latest collectives", lambda r: r.collectives),
            ],
            StragglerRow,
        )
        self.table.wrap_rows = True  # the reason is read first: whole, wrapped
        self.table.view.doubleClicked.connect(self._on_double_click)
        note_above_tables(self, self.note, self.table)

    def set_job(self, loaded: LoadedJob | None) -> None:
        rep = loaded.stragglers if loaded is not None else None
        if rep is None:
            self.note.setText("")
            self.table.set_rows([])
            return
        n = len(rep.flagged)
        spread = f"{rep.iteration_spread_ns / 1e6:,.2f} ms" if rep.iteration_spread_ns else "unknown"
        self.note.setText(
            f"{n} straggler{'s' * (n != 1)} of {len(rep.ranks)} ranks, on evidence the job's own spread "
            f"cannot explain (iterations {rep.median_iteration_ns / 1e6:,.2f} ms ± {spread}): kernels "
            "slower than the same kernels on its peers (robust z > 3.5) while it arrives last at its "
            f"collectives, or late by its own doing (> {rep.threshold_ns / 1e3:,.0f} µs) at more "
            "collectives than the other ranks, adding up to more than the iteration spread "
            "(tests at p < 1 % over the ranks)."
        )
        self.table.set_rows(straggler_rows(loaded))

    def _on_double_click(self, index: QModelIndex) -> None:
        src = self.table.proxy.mapToSource(index)
        if src.isValid():
            self.rank_requested.emit(self.table.model.rows[src.row()].rank_index)
