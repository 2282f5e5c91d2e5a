"""The pyqtgraph pieces of the timeline: the view box (wheel and drag), the row-label column and
the plot widget. They only turn input into calls on the :class:`~app.timeline.timeline_view.
TimelineView` (any object with its navigation methods) and paint the labels."""

from __future__ import annotations

import math
from typing import Protocol

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QKeyEvent, QPainter, QPen

from app.theme import Theme
from app.timeline.hit import PREDICTED
from app.timeline.lane_layout import LaneLayout, RowKind

LABEL_WIDTH = 260
ZOOM_STEP = 0.8
PREDICTED_LABEL_COLOR = {"light": "#6D28D9", "dark": "#C4B5FD"}


class Navigable(Protocol):
    """What the canvas drives: the timeline view's navigation and keys."""

    def scroll_rows(self, delta: float) -> None: ...
    def zoom(self, factor: float, center: float | None = None) -> None: ...
    def pan_by(self, dx: float, drows: float) -> None: ...
    def handle_key(self, ev: QKeyEvent) -> bool: ...


class TimelineViewBox(pg.ViewBox):
    """Wheel zooms x at the cursor, drag pans both axes, Shift+drag measures."""

    sigMeasure = Signal(float, float, bool)  # start ms, end ms, finished

    def __init__(self, view: Navigable) -> None:
        super().__init__(invertY=True, enableMenu=False, defaultPadding=0.0)
        self._view = view
        self._measuring = False

    def wheelEvent(self, ev, axis=None):  # type: ignore[no-untyped-def]
        steps = ev.delta() / 120.0
        if axis == 1 or ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self._view.scroll_rows(-3 * steps)
        else:
            self._view.zoom(ZOOM_STEP**steps, self.mapToView(ev.pos()).x())
        ev.accept()

    def mouseDragEvent(self, ev, axis=None):  # type: ignore[no-untyped-def]
        if ev.button() != Qt.MouseButton.LeftButton:
            ev.ignore()
            return
        ev.accept()
        if ev.isStart():
            self._measuring = bool(ev.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        if self._measuring:
            a = self.mapToView(ev.buttonDownPos()).x()
            b = self.mapToView(ev.pos()).x()
            self.sigMeasure.emit(a, b, bool(ev.isFinish()))
            return
        last = self.mapToView(ev.lastPos())
        now = self.mapToView(ev.pos())
        # axis 0: dragged on the time axis (pan time only); 1: on the labels (scroll rows only)
        self._view.pan_by(0.0 if axis == 1 else last.x() - now.x(), 0.0 if axis == 0 else last.y() - now.y())


class LaneLabelAxis(pg.AxisItem):
    """The left column: row labels aligned with the rows; click a header to collapse/expand."""

    sigRowClicked = Signal(int)

    def __init__(self, theme: Theme) -> None:
        super().__init__("left")
        self.theme = theme
        self.layout_model: LaneLayout | None = None
        self.setWidth(LABEL_WIDTH)
        self._font = QFont()
        self._font.setPointSizeF(8.5)
        self._bold = QFont(self._font)
        self._bold.setBold(True)

    def paint(self, p: QPainter, opt: object, widget: object = None) -> None:
        rect = self.boundingRect()
        p.fillRect(rect, QColor(self.theme.label_background))
        vb = self.linkedView()
        layout = self.layout_model
        if vb is None or layout is None:
            return
        view = vb.viewRect()
        y_lo, y_hi = sorted((view.top(), view.bottom()))
        p.setClipRect(rect)

        def local_y(row: float) -> float:
            return float(self.mapFromScene(vb.mapViewToScene(QPointF(view.left(), row))).y())

        fm = QFontMetricsF(self._font)
        fmb = QFontMetricsF(self._bold)
        width = rect.width() - 10
        grid = QPen(QColor(self.theme.grid))
        for r in range(max(0, math.floor(y_lo)), min(len(layout.rows), math.ceil(y_hi))):
            row = layout.rows[r]
            y0, y1 = local_y(r), local_y(r + 1)
            box = QRectF(rect.left() + 6, y0, width, y1 - y0)
            if row.kind == RowKind.RANK:
                p.fillRect(QRectF(rect.left(), y0, rect.width(), y1 - y0), QColor(self.theme.header_band))
                p.setPen(grid)
                p.drawLine(QPointF(rect.left(), y0), QPointF(rect.right(), y0))
                arrow = "▸" if row.rank_index in layout.collapsed_ranks else "▾"
                text = fmb.elidedText(f"{arrow} {row.label}", Qt.TextElideMode.ElideRight, width)
                p.setFont(self._bold)
                p.setPen(QColor(self.theme.foreground))
            else:
                indent = 14.0
                label = row.label
                twin = layout.paired and row.layer == PREDICTED
                if row.kind == RowKind.CPU_GROUP and not twin:
                    label = f"▸ {label}"
                elif row.kind == RowKind.CPU and row.depth == 0 and not twin:
                    label = f"▾ {label}"
                box.setLeft(box.left() + indent)
                text = fm.elidedText(label, Qt.TextElideMode.ElideRight, width - indent)
                p.setFont(self._font)
                muted = row.depth > 0 and row.kind == RowKind.GPU
                if twin:
                    p.setPen(QColor(PREDICTED_LABEL_COLOR.get(self.theme.name, "#6D28D9")))
                else:
                    p.setPen(QColor(self.theme.muted if muted else self.theme.foreground))
            p.drawText(box, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), text)
        edge = QPen(QColor(self.theme.grid))
        p.setPen(edge)
        p.drawLine(QPointF(rect.right() - 0.5, rect.top()), QPointF(rect.right() - 0.5, rect.bottom()))

    def mouseClickEvent(self, ev):  # type: ignore[no-untyped-def]
        vb = self.linkedView()
        if vb is None or ev.button() != Qt.MouseButton.LeftButton:
            return
        y = vb.mapSceneToView(ev.scenePos()).y()
        if y >= 0:
            self.sigRowClicked.emit(int(y))
        ev.accept()


class TimelineCanvas(pg.PlotWidget):
    """The plot widget; forwards navigation keys to the view."""

    def __init__(self, view: Navigable, plot_item: pg.PlotItem) -> None:
        super().__init__(plotItem=plot_item)
        self._view = view
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def keyPressEvent(self, ev: QKeyEvent) -> None:
        if not self._view.handle_key(ev):
            super().keyPressEvent(ev)
