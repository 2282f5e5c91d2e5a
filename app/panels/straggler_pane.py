"""Summary tab Stragglers: ranks that arrive late at their collectives (or run long iterations), by
how much and at which collectives; double-click a row to scroll the timeline to that rank.

Detection is :func:`lumos_core.replay.stragglers.find_stragglers`, run with the job off the GUI
thread; the same flagged ranks get a red tick in the timeline's overview strip.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QModelIndex, Signal
from PySide6.QtWidgets import QLabel, QWidget

from app.loaded_job import LoadedJob
from app.panels.table_model import Column, ns_as_us
from app.panels.table_pane import TablePane, note_above_tables


@dataclass(frozen=True)
class StragglerRow:
    rank: int
    rank_index: int
    flagged: str
    late: str  # "n of m"
    n_late: int
    mean_late_ns: float
    max_late_ns: int
    iteration_late_ns: int
    collectives: str  # the latest collectives: kind, group, lateness


def straggler_rows(loaded: LoadedJob) -> list[StragglerRow]:
    rep = loaded.stragglers
    if rep is None:
        return []
    rows = []
    for r in rep.ranks:
        if not (r.flagged or r.n_late):
            continue  # a table of every punctual rank of a 512-rank job says nothing
        where = ", ".join(f"{c.kind} #{c.instance} [{c.group}] +{c.late_ns / 1e3:,.0f} µs" for c in r.worst)
        rows.append(
            StragglerRow(
                r.rank,
                r.rank_index,
                "yes" if r.flagged else "",
                f"{r.n_late} of {r.n_collectives}",
                r.n_late,
                r.mean_late_ns,
                r.max_late_ns,
                r.iteration_late_ns,
                where,
            )
        )
    return rows


class StragglerPane(QWidget):
    """The note (threshold and why) above the table of late ranks."""

    rank_requested = Signal(int)  # rank index: scroll the timeline to it

    def __init__(self) -> None:
        super().__init__()
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.table = TablePane(
            "stragglers",
            [
                Column("rank", lambda r: r.rank, numeric=True),
                Column(
                    "straggler", lambda r: r.flagged, tooltip="late at a quarter or more of its collectives"
                ),
                Column(
                    "late at", lambda r: r.late, tooltip="collectives it arrived late at, of those it joined"
                ),
                Column(
                    "mean late (µs)", lambda r: r.mean_late_ns, ns_as_us, "after the median arrival", True
                ),
                Column("max late (µs)", lambda r: r.max_late_ns, ns_as_us, "after the median arrival", True),
                Column(
                    "iteration excess (µs)",
                    lambda r: r.iteration_late_ns,
                    ns_as_us,
                    "longest iteration minus that iteration's median over ranks",
                    True,
                ),
                Column("latest collectives (double-click: go to the rank)", lambda r: r.collectives),
            ],
            StragglerRow,
        )
        self.table.view.doubleClicked.connect(self._on_double_click)
        note_above_tables(self, self.note, self.table)

    def set_job(self, loaded: LoadedJob | None) -> None:
        rep = loaded.stragglers if loaded is not None else None
        if rep is None:
            self.note.setText("")
            self.table.set_rows([])
            return
        n = len(rep.flagged)
        self.note.setText(
            f"{n} straggler{'s' * (n != 1)} of {len(rep.ranks)} ranks. A rank is late at a collective when it "
            f"starts it more than {rep.threshold_ns / 1e3:,.0f} µs after the median member (the larger of "
            f"50 µs, above clock-alignment error, and 1 % of the {rep.median_iteration_ns / 1e6:,.2f} ms "
            "median iteration); flagged when late at a quarter or more of its collectives, or when an "
            "iteration runs that much longer than the median."
        )
        self.table.set_rows(straggler_rows(loaded), sort_column=4)

    def _on_double_click(self, index: QModelIndex) -> None:
        src = self.table.proxy.mapToSource(index)
        if src.isValid():
            self.rank_requested.emit(self.table.model.rows[src.row()].rank_index)
