"""File ▸ Compare with Measured Job…: another measured job (B) drawn under the open one (A) on the
same time axis, and a Diff pane (:class:`app.panels.diff_pane.DiffPane`) with what ``lumos diff A B``
says: top changes, breakdown, families with their kernels, collectives, ranks, the noise.

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
    QMainWindow,
    QVBoxLayout,
    QWidget,
)

from app.jobs import BackgroundTask
from app.panels.diff_pane import DiffPane
from app.timeline.timeline_view import TimelineView
from app.view_model.lane_data import build_row_table
from app.view_model.layer import IterationMark
from app.view_model.loaded_job import LoadedJob
from app.view_model.overlay_data import PredictedOverlay
from lumos_core.api.loading import load_job
from lumos_core.api.views import JobDiff, diff_jobs, event_families, steady_windows
from lumos_core.trace.model import Job

_ROWS = 2000  # kernel and operator rows at most (the largest changes)


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
        self.pane = DiffPane(body)
        self.title = self.pane.title
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
        lay.addWidget(self.pane, 1)
        self.pane.name_selected.connect(self.highlight)
        self.dock.setWidget(body)
        self.dock.hide()

    # ---------------------------------------------------------------- job changes
    def set_job(self, loaded: LoadedJob | None) -> None:
        self._token += 1  # a comparison on its way belongs to the old job
        self.loaded = loaded
        self.job_b = None
        self.diff = None
        self.pane.clear()

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
        self.pane.clear(f"loading and comparing {path}…")
        self.dock.show()
        task.start()
        return True

    @property
    def busy(self) -> bool:
        return self._task is not None and self._task.is_running()

    def _on_failed(self, token: int, message: str) -> None:
        if token == self._token:
            self.pane.clear(f"comparison failed: {message}")
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
        self._give_room()
        self.compared.emit(diff)

    def _give_room(self) -> None:
        """A fresh Diff dock gets half the window's width and most of its height: it is a table of
        names and numbers, unreadable in the sliver a new dock is given."""
        win = self.dock.parentWidget()
        if isinstance(win, QMainWindow) and not self.dock.isFloating():
            details = win.findChild(QDockWidget, "DetailsDock")  # shares its place, in a tab
            if (
                details is not None
                and details.isVisible()
                and self.dock not in win.tabifiedDockWidgets(details)
                and win.dockWidgetArea(details) == win.dockWidgetArea(self.dock)
            ):
                win.tabifyDockWidget(details, self.dock)
                self.dock.raise_()
            win.resizeDocks(
                [self.dock], [max(self.dock.width(), win.width() // 2)], Qt.Orientation.Horizontal
            )
            win.resizeDocks(
                [self.dock], [max(self.dock.height(), win.height() * 2 // 3)], Qt.Orientation.Vertical
            )

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
        self.pane.set_diff(diff.as_dict(limit=_ROWS))  # kernels: collapsed under their families

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
