"""Graphics items that draw the timeline: spans of every visible row, and a light overlay.

:class:`TimelineItem` draws, for the rows in view, the level-of-detail spans of each layer
(:mod:`app.view_model.layer`) as a frame (:mod:`app.timeline.frame`: numpy-built device rectangles,
one ``QPainter.drawRects`` per colour, no item per event). The computed frame is cached until the
view, the layout or the highlights change, so hover repaints cost a few drawRects.

:class:`OverlayItem` draws what changes on interaction: the selected task, the arrow from its launch
call, the measured span.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPen, QPolygonF

from app.theme import LIGHT, Theme
from app.timeline.extent_item import ExtentItem
from app.timeline.frame import Frame, build_frame, paint_frame
from app.timeline.lane_layout import LaneLayout
from app.view_model.layer import IterationMark, Layer, LayerStyle
from app.view_model.row_tables import tables_end_ms

__all__ = [
    "IterationMark",
    "Layer",
    "LayerStyle",
    "Marker",
    "OverlayItem",
    "TimelineItem",
    "format_duration_ms",
]


class TimelineItem(ExtentItem):
    """All rows of the timeline in one item (see module docstring)."""

    sigPainted = Signal(float)  # seconds the paint took
    # [(layer, rank index)] whose row tables the frame needed (in view) or will soon (a screen
    # away) and that are not built yet; emitted once per built frame
    sigTablesMissing = Signal(object)

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__(theme)
        self.layers: list[Layer] = []
        self.layout: LaneLayout | None = None
        self.iterations: list[list[IterationMark]] = []
        self.match_masks: list[np.ndarray | None] = []  # per rank, over layer 0's table indices
        self._frame: Frame | None = None
        self._key: tuple | None = None
        self._version = 0
        self.last_paint_s = 0.0
        self.last_span_count = 0
        self.last_missing = 0
        self._font = QFont()
        self._font.setPointSizeF(8.0)
        self._bold = QFont(self._font)
        self._bold.setBold(True)

    # ---- data
    def set_data(
        self, layers: list[Layer], layout: LaneLayout, iterations: list[list[IterationMark]]
    ) -> None:
        self.prepareGeometryChange()
        self.layers = layers
        self.layout = layout
        self.iterations = iterations
        self.match_masks = [None] * len(layout.ranks)
        x1 = max((tables_end_ms(layer.tables) for layer in layers), default=0.0)
        self._extent = QRectF(0.0, 0.0, max(x1, 1e-3), max(len(layout), 1))
        self.invalidate()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.invalidate()

    def set_match_masks(self, masks: list[np.ndarray | None]) -> None:
        self.match_masks = masks
        self.invalidate()

    def layout_changed(self) -> None:
        self.prepareGeometryChange()
        if self.layout is not None:
            self._extent.setHeight(max(len(self.layout), 1))
        self.invalidate()

    def invalidate(self) -> None:
        self._version += 1
        self._key = None
        self.update()

    def data_extent(self) -> QRectF:
        return QRectF(self._extent)

    # ---- QGraphicsItem (the bounding rectangle is ExtentItem's)
    def paint(self, p: QPainter, opt: object, widget: object = None) -> None:
        t0 = time.perf_counter()
        vb = self.getViewBox()
        if vb is None or self.layout is None or not self.layers:
            return
        view = vb.viewRect()
        tr = p.transform()
        key = (
            view.left(),
            view.right(),
            view.top(),
            view.bottom(),
            tr.m11(),
            tr.dx(),
            tr.m22(),
            tr.dy(),
            self._version,
            self.layout.version,
        )
        if key != self._key or self._frame is None:
            self._frame = build_frame(
                self.layers,
                self.layout,
                self.iterations,
                self.match_masks,
                self.theme,
                self._font,
                view,
                tr.m11(),
                tr.dx(),
                tr.m22(),
                tr.dy(),
            )
            self._key = key
            if self._frame.missing:
                self.sigTablesMissing.emit(self._frame.missing)
        p.save()
        p.resetTransform()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        paint_frame(p, self._frame, self.theme, self._font)
        p.restore()
        self.last_paint_s = time.perf_counter() - t0
        self.last_span_count = self._frame.n_spans
        self.last_missing = self._frame.n_missing_in_view  # rows in view drawn empty, tables pending
        self.sigPainted.emit(self.last_paint_s)


@dataclass
class Marker:
    """Something the overlay draws, in data coordinates (ms, rows)."""

    x0: float
    x1: float
    row: int


class OverlayItem(ExtentItem):
    """Selection outline, launch → kernel arrow, measured span (cheap to repaint)."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__(theme)
        self.selection: Marker | None = None
        self.arrow: tuple[QPointF, QPointF] | None = None  # data coordinates
        self.measure: tuple[float, float] | None = None
        self._font = QFont()
        self._font.setPointSizeF(8.5)
        self._font.setBold(True)

    def paint(self, p: QPainter, opt: object, widget: object = None) -> None:
        vb = self.getViewBox()
        if vb is None:
            return
        view = vb.viewRect()
        tr = p.transform()
        sx, ox, sy, oy = tr.m11(), tr.dx(), tr.m22(), tr.dy()
        xl, xr = view.left() * sx + ox, view.right() * sx + ox
        y_lo, y_hi = sorted((view.top() * sy + oy, view.bottom() * sy + oy))
        p.save()
        p.resetTransform()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        th = self.theme
        if self.measure is not None:
            a, b = sorted(self.measure)
            xa = min(max(a * sx + ox, xl - 2), xr + 2)
            xb = min(max(b * sx + ox, xl - 2), xr + 2)
            fill = QColor(th.measure_fill)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(fill)
            p.drawRect(QRectF(xa, y_lo, max(xb - xa, 1.0), y_hi - y_lo))
            edge = QColor(fill)
            edge.setAlpha(255)
            pen = QPen(edge)
            pen.setWidthF(1.5)
            p.setPen(pen)
            p.drawLine(QLineF(xa, y_lo, xa, y_hi))
            p.drawLine(QLineF(xb, y_lo, xb, y_hi))
            text = format_duration_ms(b - a)
            p.setFont(self._font)
            fm = QFontMetricsF(self._font)
            tw = fm.horizontalAdvance(text) + 12
            box = QRectF((xa + xb) / 2 - tw / 2, y_lo + 4, tw, fm.height() + 6)
            p.setBrush(QColor(th.background))
            p.drawRoundedRect(box, 4, 4)
            p.setPen(QColor(th.foreground))
            p.drawText(box, int(Qt.AlignmentFlag.AlignCenter), text)
        if self.selection is not None:
            s = self.selection
            xa = min(max(s.x0 * sx + ox, xl - 4), xr + 4)
            xb = min(max(s.x1 * sx + ox, xl - 4), xr + 4)
            top = s.row * sy + oy
            pen = QPen(QColor(th.selection))
            pen.setWidthF(2.0)
            p.setPen(pen)
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(xa - 1.5, top + 0.5, max(xb - xa, 2.0) + 3, sy - 1))
        if self.arrow is not None:
            a, b = self.arrow
            pa = QPointF(a.x() * sx + ox, a.y() * sy + oy)
            pb = QPointF(b.x() * sx + ox, b.y() * sy + oy)
            _draw_arrow(p, pa, pb, QColor(th.arrow))
        p.restore()


def _draw_arrow(p: QPainter, a: QPointF, b: QPointF, color: QColor) -> None:
    pen = QPen(color)
    pen.setWidthF(1.8)
    p.setPen(pen)
    p.setBrush(QBrush(color))
    p.drawLine(QLineF(a, b))
    dx, dy = b.x() - a.x(), b.y() - a.y()
    length = math.hypot(dx, dy)
    if length < 1:
        return
    ux, uy = dx / length, dy / length
    size = 8.0
    left = QPointF(b.x() - size * ux + size * 0.5 * uy, b.y() - size * uy - size * 0.5 * ux)
    right = QPointF(b.x() - size * ux - size * 0.5 * uy, b.y() - size * uy + size * 0.5 * ux)
    p.drawPolygon(QPolygonF([b, left, right]))
    p.drawEllipse(a, 3.0, 3.0)


def format_duration_ms(ms: float) -> str:
    """A duration in the unit that reads best: ns, µs, ms or s."""
    a = abs(ms)
    if a >= 1000:
        return f"{ms / 1000:.3f} s"
    if a >= 1:
        return f"{ms:.3f} ms"
    if a >= 1e-3:
        return f"{ms * 1000:.2f} µs"
    return f"{ms * 1e6:.0f} ns"
