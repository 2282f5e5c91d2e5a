"""The job overview: a strip above the lanes with one row of pixels per rank, coloured by what the
rank's GPU is doing in each column of the visible time range (compute, communication or idle, see
:mod:`app.view_model.overview_data`), so a rank that computes while the others wait, or arrives late
at a collective, stands out at a glance among hundreds.

The strip follows the timeline's x range and lines up with its plot area. Clicking a row scrolls
the timeline to that rank. Flagged stragglers (:meth:`OverviewStrip.set_flagged`) get a red tick
in the strip's left margin; the ranks in view are outlined there.

Binning hundreds of ranks takes tens of milliseconds (~50 CPU ms at 512 ranks and 1000 columns on
a 2-core machine), too long for the GUI thread while panning: a strip of more than
:data:`WORKER_CELLS` cells is binned on a worker thread and shows the last binned range meanwhile.
"""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QWidget

from app.jobs import BackgroundTask
from app.theme import Theme
from app.view_model.lane_data import RowTable
from app.view_model.overview_data import (
    CLASS_FAMILY,
    COMMUNICATION,
    COMPUTE,
    IDLE,
    RankActivity,
    activity_classes,
    activity_index,
)
from lumos_core.trace.model import RankTrace

MAX_HEIGHT_PX = 160  # taller jobs are scaled down: the image still has one row per rank
MAX_ROW_PX = 6  # small jobs get thicker rows
MIN_HEIGHT_PX = 40  # room for the margin text
MAX_COLUMNS = 1024  # binning cost grows with columns: ~50 CPU ms per 1000 columns at 512 ranks here
# strips with more cells than this (ranks x columns) are binned on a worker when the view moves
WORKER_CELLS = 100_000
STRAGGLER_COLOR = "#DC2626"


class OverviewStrip(QWidget):
    """Ranks × time image of the job (see the module docstring)."""

    rank_clicked = Signal(int)  # rank index (into job.ranks)

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.ranks: list[RankTrace] = []
        self.tables: list[RowTable] = []
        self.index: list[RankActivity] = []
        self.classes = np.zeros((0, 0), np.int8)
        self.flagged: dict[int, str] = {}  # rank index -> why
        self.in_view: tuple[int, int] = (0, 0)  # first and last rank index shown in the lanes
        self.plot_left = 0.0  # the plot area's x in this widget
        self.plot_width = 0.0
        self.x_range = (0.0, 1.0)
        self.last_build_s = 0.0
        self._image: QImage | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(15)  # coalesce the range changes of one drag or wheel
        self._timer.timeout.connect(self.rebuild_soon)
        self._task: BackgroundTask | None = None  # the worker binning a big job's strip
        self._again = False  # the view moved while it ran: bin once more when it is done
        self._job = 0  # counts set_job calls: a worker's strip of another job is dropped
        self._closed = False
        self.setMouseTracking(True)
        self.setVisible(False)

    # ---- data
    def set_job(
        self,
        ranks: list[RankTrace],
        tables: list[RowTable],
        index: list[RankActivity] | None = None,
    ) -> None:
        self._job += 1
        self.ranks, self.tables = ranks, tables
        self.index = index if index is not None else activity_index(ranks, tables)
        self.flagged = {}
        self.classes = np.zeros((len(ranks), 0), np.int8)
        self._image = None
        # a job without GPU streams (CPU-only) has nothing to show here
        self.setVisible(any(len(s) for act in self.index for s, *_rest in act.classes))
        n = len(ranks)
        row_px = max(1, min(MAX_ROW_PX, MAX_HEIGHT_PX // max(n, 1)))
        self.setFixedHeight(min(MAX_HEIGHT_PX, max(n * row_px, MIN_HEIGHT_PX)) + 2)

    def set_flagged(self, flagged: dict[int, str]) -> None:
        self.flagged = dict(flagged)
        self.update()

    def follow(self, x0: float, x1: float, plot_left: float, plot_width: float) -> None:
        """The timeline's x range and plot area changed: rebuild soon (once per burst)."""
        self.x_range = (x0, x1)
        self.plot_left, self.plot_width = plot_left, plot_width
        self._timer.start()

    def rebuild(self) -> None:
        """Bin every rank's GPU activity into the strip's pixel columns, now, on this thread."""
        width = min(int(self.plot_width), MAX_COLUMNS)  # wider plots scale the image up
        if not self.ranks or width <= 0:
            return
        t0 = time.perf_counter()
        self.classes = activity_classes(self.ranks, self.tables, *self.x_range, width, self.index)
        self._image = self._to_image(self.classes)
        self.last_build_s = time.perf_counter() - t0
        self.update()

    def rebuild_soon(self) -> None:
        """The view moved: bin again, on a worker for a big strip (tens of ms at 512 ranks), else
        now. While a worker bins, newer moves wait for it and then bin once more, for the latest
        range; the strip meanwhile shows the last one binned."""
        width = min(int(self.plot_width), MAX_COLUMNS)
        if len(self.ranks) * width < WORKER_CELLS:
            self.rebuild()
            return
        if self._closed or not self.ranks or width <= 0:
            return
        if self._task is not None:
            self._again = True
            return
        ranks, tables, index, (x0, x1) = self.ranks, self.tables, self.index, self.x_range

        def work(_progress, _on_file):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            classes = activity_classes(ranks, tables, x0, x1, width, index)
            return classes, time.perf_counter() - t0

        task = BackgroundTask(work, self._job)
        task.succeeded.connect(self._binned)
        task.finished.connect(self._bin_done)
        self._task = task
        task.start()

    def _binned(self, job: int, result: tuple[np.ndarray, float]) -> None:
        if job != self._job:
            return  # another job's strip
        self.classes, self.last_build_s = result
        self._image = self._to_image(self.classes)
        self.update()

    def _bin_done(self, _job: int) -> None:
        if self._task is not None:
            self._task.wait()
        self._task = None
        if self._again:
            self._again = False
            self.rebuild_soon()

    @property
    def binning(self) -> bool:
        """A worker is binning the strip (or will again)."""
        return self._task is not None or self._again or self._timer.isActive()

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Wait for the binning worker (before the strip goes away); nothing starts after it."""
        self._closed = True
        self._timer.stop()
        self._again = False
        if self._task is not None:
            self._task.wait(timeout_ms)
            self._task = None

    def class_colors(self) -> np.ndarray:
        """RGBA per class (IDLE, COMPUTE, COMMUNICATION): the families' colours, idle as the grid."""
        out = np.zeros((3, 4), np.uint8)
        for cls, color in (
            (IDLE, QColor(self.theme.header_band)),
            (COMPUTE, self.theme.family_color(CLASS_FAMILY[COMPUTE])),
            (COMMUNICATION, self.theme.family_color(CLASS_FAMILY[COMMUNICATION])),
        ):
            out[cls] = (color.red(), color.green(), color.blue(), 255)
        return out

    def _to_image(self, classes: np.ndarray) -> QImage:
        rgba = np.ascontiguousarray(self.class_colors()[classes])
        h, w = classes.shape
        img = QImage(rgba.data, w, h, 4 * w, QImage.Format.Format_RGBA8888)
        return img.copy()  # own the pixels: ``rgba`` goes away

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        if self.classes.size:
            self._image = self._to_image(self.classes)
        self.update()

    # ---- geometry
    def image_rect(self) -> QRectF:
        return QRectF(self.plot_left, 1.0, self.plot_width, self.height() - 2.0)

    def rank_at(self, y: float) -> int:
        n = len(self.ranks)
        r = self.image_rect()
        if n == 0 or r.height() <= 0:
            return -1
        return int(min(max((y - r.top()) / r.height() * n, 0), n - 1))

    # ---- events
    def paintEvent(self, ev: QPaintEvent) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(self.theme.background))
        r = self.image_rect()
        n = len(self.ranks)
        if self._image is not None and n:
            p.drawImage(r, self._image)
        if n:
            row_h = r.height() / n
            margin = QRectF(0, r.top(), max(self.plot_left - 2, 0), r.height())
            p.setPen(QColor(self.theme.muted))
            p.drawText(
                margin.adjusted(6, 0, -14, 0),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                f"overview · {n} ranks\nby GPU activity (compute, comm., idle)"
                + (
                    f"\n{len(self.flagged)} straggler{'s' * (len(self.flagged) != 1)}" if self.flagged else ""
                ),
            )
            a, b = self.in_view
            if b >= a:
                pen = QPen(QColor(self.theme.foreground))
                pen.setCosmetic(True)
                p.setPen(pen)
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.drawRect(QRectF(margin.right() - 8, r.top() + a * row_h, 6, max((b - a + 1) * row_h, 2)))
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(STRAGGLER_COLOR))
            for ri in self.flagged:
                y = r.top() + ri * row_h
                p.drawRect(QRectF(margin.right() - 2, y, 4, max(row_h, 2.0)))
                p.drawRect(QRectF(r.right() - 3, y, 3, max(row_h, 2.0)))
        p.end()

    def mousePressEvent(self, ev: QMouseEvent) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ri = self.rank_at(ev.position().y())
            if ri >= 0:
                self.rank_clicked.emit(ri)
                ev.accept()
                return
        super().mousePressEvent(ev)

    def mouseMoveEvent(self, ev: QMouseEvent) -> None:
        ri = self.rank_at(ev.position().y())
        if 0 <= ri < len(self.ranks):
            why = self.flagged.get(ri, "")
            self.setToolTip(
                f"rank {self.ranks[ri].rank}" + (f" — straggler: {why}" if why else "") + " (click to go)"
            )
        super().mouseMoveEvent(ev)


__all__ = ["OverviewStrip"]
