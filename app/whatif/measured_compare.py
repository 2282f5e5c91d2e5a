"""File ▸ Compare with Measured Job…: another measured job (B) drawn under the open one (A) on the
same time axis, and a Diff pane with the deltas of ``lumos diff A B``.

B's ranks are shown as extra rank groups below A's (the "separate" shape of a prediction overlay),
so zoom and pan are shared. Iterations are aligned: B is shifted so that its first steady-state
iteration starts where A's does, plus an offset the pane adjusts. B is loaded and diffed on a worker
thread; selecting a row of the Diff pane searches the timeline for that kernel or operator name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.jobs import BackgroundTask
from app.loaded_job import LoadedJob
from app.timeline.lane_data import build_row_table
from app.timeline.layer import IterationMark
from app.timeline.overlay_data import PredictedOverlay
from app.timeline.timeline_view import TimelineView
from lumos_core.compare.diff import JobDiff, diff_jobs
from lumos_core.replay.breakdown import steady_windows
from lumos_core.trace.kernel_families import event_families
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Job

_ROWS = 200


def first_steady_start(job: Job) -> int:
    starts = [w[0].start for w in (steady_windows(t) for t in job.ranks) if w]
    return min(starts) if starts else 0


class MeasuredCompare(QObject):
    """See the module docstring. ``dock`` is the Diff pane (hidden until a comparison is made)."""

    compared = Signal(object)  # JobDiff
    failed = Signal(str)

    def __init__(self, timeline: TimelineView, parent: QWidget) -> None:
        super().__init__(parent)
        self.timeline = timeline
        self.loaded: LoadedJob | None = None
        self.job_b: Job | None = None
        self.diff: JobDiff | None = None
        self.shift_ns = 0  # applied to B's times
        self.tables_b: list[Any] = []  # B's row tables as drawn
        self._task: BackgroundTask | None = None
        self._token = 0
        self.dock = QDockWidget("Diff", parent)
        self.dock.setObjectName("diff_dock")
        body = QWidget(self.dock)
        lay = QVBoxLayout(body)
        self.title = QLabel("File ▸ Compare with Measured Job… to diff another run", body)
        self.title.setWordWrap(True)
        lay.addWidget(self.title)
        row = QHBoxLayout()
        row.addWidget(QLabel("B offset (ms):", body))
        self.offset = QDoubleSpinBox(body)
        self.offset.setRange(-1e7, 1e7)
        self.offset.setDecimals(3)
        self.offset.setSingleStep(1.0)
        self.offset.valueChanged.connect(lambda _v: self._draw())
        row.addWidget(self.offset)
        row.addStretch(1)
        lay.addLayout(row)
        self.table = QTableWidget(0, 5, body)
        self.table.setHorizontalHeaderLabels(["what", "A ms", "B ms", "B-A ms", "status"])
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.itemSelectionChanged.connect(self._on_select)
        lay.addWidget(self.table)
        self.dock.setWidget(body)
        self.dock.hide()

    # ---------------------------------------------------------------- job changes
    def set_job(self, loaded: LoadedJob | None) -> None:
        self._token += 1  # a comparison on its way belongs to the old job
        self.loaded = loaded
        self.job_b = None
        self.diff = None
        self.table.setRowCount(0)
        self.title.setText("File ▸ Compare with Measured Job… to diff another run")

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task.wait()
            self._task = None

    # ---------------------------------------------------------------- requests
    def ask(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.dock.parentWidget(), "Compare with Measured Job")
        if folder:
            self.compare_with(folder)

    def compare_with(self, path: str | Path) -> bool:
        if self.loaded is None:
            return False
        self.shutdown()
        self._token += 1
        token = self._token
        job_a = self.loaded.job

        def work(progress: Any, _on_file: object) -> tuple[Job, JobDiff]:
            job_b = load_job(path, progress=progress, workers=1)
            progress(0.9, "comparing")
            return job_b, diff_jobs(job_a, job_b)

        task = BackgroundTask(work, token)
        task.succeeded.connect(self._on_done)
        task.failed.connect(lambda t, msg: self._on_failed(t, msg))
        self._task = task
        self.title.setText(f"loading and comparing {path}…")
        task.start()
        return True

    @property
    def busy(self) -> bool:
        return self._task is not None and self._task.is_running()

    def _on_failed(self, token: int, message: str) -> None:
        if token == self._token:
            self.title.setText(f"comparison failed: {message}")
            self.failed.emit(message)

    def _on_done(self, token: int, payload: object) -> None:
        if token != self._token or self.loaded is None:
            return
        job_b, diff = payload  # type: ignore[misc]
        self.job_b, self.diff = job_b, diff
        self.shift_ns = 0
        self._fill(diff)
        self._draw()
        self.dock.show()
        self.dock.raise_()
        self.compared.emit(diff)

    # ---------------------------------------------------------------- drawing
    def _draw(self) -> None:
        if self.loaded is None or self.job_b is None:
            return
        want = (
            first_steady_start(self.loaded.job)
            - first_steady_start(self.job_b)
            + round(self.offset.value() * 1e6)
        )
        delta = want - self.shift_ns
        for t in self.job_b.ranks:
            t.shift(delta)  # B is ours alone: moved (its row tables are rebuilt below)
        self.shift_ns = want
        ranks = list(self.job_b.ranks)
        families = [event_families(t) for t in ranks]
        marks = [
            [IterationMark(it.name, it.cpu_start / 1e6, it.cpu_end / 1e6) for it in t.iterations]
            for t in ranks
        ]
        name = Path(self.job_b.path).name
        self.tables_b = [build_row_table(t, f) for t, f in zip(ranks, families)]
        overlay = PredictedOverlay(
            ranks=ranks,
            tables=self.tables_b,
            families=families,
            present=[True] * len(ranks),
            labels=[f"B rank {t.rank} · measured ({name})" for t in ranks],
            sim_rank=[t.rank for t in ranks],
            iterations=marks,
            world_size=self.job_b.world_size,
            same_ranks=False,
            separate=True,
            measured_first=True,
        )
        self.timeline.set_prediction(overlay, "paired")

    def _fill(self, diff: JobDiff) -> None:
        d = diff.as_dict(limit=_ROWS)
        knobs = ", ".join(f"{k} {a}→{b}" for k, (a, b) in sorted(d["differing_knobs"].items())) or "none"
        self.title.setText(
            f"A {d['a']['iteration_us'] / 1000:.2f} ms, B {d['b']['iteration_us'] / 1000:.2f} ms per iteration "
            f"({d['iteration_delta_pct']:+.1f}%); knobs that differ: {knobs}"
        )
        rows: list[tuple[str, float, float, float, str, str]] = []
        for r in d["families"]:
            rows.append((f"family: {r['family']}", r["a_us"], r["b_us"], r["delta_us"], "", ""))
        for r in d["collective_kinds"]:
            rows.append((f"collective: {r['kind']}", r["a_us"], r["b_us"], r["delta_us"], "", ""))
        for r in d["kernels"]:
            name = r["kernel"].split(" [[", 1)[0]
            rows.append((r["kernel"], r["a_us"], r["b_us"], r["delta_us"], r["status"], name))
        self.table.setRowCount(len(rows))
        for i, (what, a, b, dd, status, search) in enumerate(rows):
            item = QTableWidgetItem(what)
            item.setData(Qt.ItemDataRole.UserRole, search)
            item.setToolTip(what)
            self.table.setItem(i, 0, item)
            for j, v in enumerate((a, b, dd), start=1):
                cell = QTableWidgetItem(f"{v / 1000:.3f}")
                cell.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, cell)
            self.table.setItem(i, 4, QTableWidgetItem(status))
        self.table.resizeColumnsToContents()

    def _on_select(self) -> None:
        rows = {i.row() for i in self.table.selectedItems()}
        if not rows:
            return
        item = self.table.item(min(rows), 0)
        name = item.data(Qt.ItemDataRole.UserRole) if item is not None else ""
        if name:
            self.highlight(name)

    def highlight(self, name: str) -> int:
        """Highlight the tasks whose name contains ``name`` in both jobs; returns B's count."""
        self.timeline.set_search(name)
        if self.job_b is None or not self.tables_b:
            return 0
        needle = name.strip().lower()
        masks: list[np.ndarray | None] = []
        found = 0
        for t, table in zip(self.job_b.ranks, self.tables_b):
            hit = np.fromiter((needle in s.lower() for s in t.strings), bool, len(t.strings))
            mask = hit[t.name[table.event]] if hit.any() else None
            found += int(mask.sum()) if mask is not None else 0
            masks.append(mask)
        combined = list(self.timeline.match_masks) + masks
        self.timeline.match_masks = combined  # kept across relayouts, like the search's own
        self.timeline.item.set_match_masks(combined)
        return found
