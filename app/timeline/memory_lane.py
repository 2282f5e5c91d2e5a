"""The memory lane: each rank's allocated and reserved memory over time, the peak marked.

Drawn from the profiler's memory records (``rank.memory``) into the rows of kind
:attr:`~app.timeline.lane_layout.RowKind.MEMORY` (one band of
:data:`~app.timeline.lane_layout.MEMORY_ROWS` rows per rank). The curve is a step function (a
total holds until the next record); zoomed out, many records fall into one pixel and the pixel
shows their maximum, so a peak is never lost to downsampling. The scale is per rank: 0 at the
band's bottom, the rank's highest total at its top (the row labels say it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen, QPolygonF

from app.theme import LIGHT, Theme
from app.timeline.extent_item import ExtentItem
from app.timeline.lane_layout import MEMORY_ROWS, LaneLayout, RowKind
from lumos_core.api.views import DEVICE_CUDA, DeviceMemory, format_bytes
from lumos_core.trace.model import RankTrace

ALLOCATED = "#2563EB"
RESERVED = "#D97706"
PEAK = "#DC2626"


@dataclass
class MemoryCurve:
    """One rank's curve: times (ms), totals (bytes), and the peak to mark."""

    ms: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray
    top: float  # bytes at the band's top
    peak_ms: float
    peak_bytes: int
    label: str  # "peak 125.6 MiB · aten::mm"


def curve_for(rank: RankTrace, devices: list[DeviceMemory]) -> MemoryCurve | None:
    """The curve of the device that matters (the GPU where there is one), or None."""
    if not devices:
        return None
    dev = next((d for d in devices if d.device_type == DEVICE_CUDA), devices[0])
    rows = rank.memory.of_device(dev.device_type, dev.device_id)
    alloc = rank.memory.allocated[rows].astype(np.float64)
    reserved = rank.memory.reserved[rows].astype(np.float64)
    top = float(max(alloc.max(), reserved.max(), 1.0))
    return MemoryCurve(
        ms=rank.memory.ts[rows] / 1e6,
        allocated=alloc,
        reserved=reserved,
        top=top * 1.08,  # headroom for the peak label
        peak_ms=dev.peak_ts / 1e6,
        peak_bytes=dev.peak_allocated,
        label=f"peak {format_bytes(dev.peak_allocated)} ({dev.label})"
        + (f" · {dev.peak_operator}" if dev.peak_operator else ""),
    )


def step_points(
    ms: np.ndarray, values: np.ndarray, lo: float, hi: float, px: float
) -> tuple[np.ndarray, np.ndarray]:
    """Points of the step curve inside [lo, hi] ms, at most about two per pixel (max per pixel)."""
    if not len(ms):
        return ms, values
    a = max(int(np.searchsorted(ms, lo, side="right")) - 1, 0)
    b = min(int(np.searchsorted(ms, hi, side="right")) + 1, len(ms))
    x, v = ms[a:b], values[a:b]
    if len(x) > 2 and (x[-1] - x[0]) / px < len(x):
        col = np.floor((x - x[0]) / px).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
        x = x[starts]
        v = np.maximum.reduceat(v, starts)
    # a step: the value holds until the next point
    xs = np.repeat(x, 2)[1:]
    vs = np.repeat(v, 2)[:-1]
    return np.r_[xs, hi if hi > x[-1] else x[-1]], np.r_[vs, v[-1]]


class MemoryLaneItem(ExtentItem):
    """Paints every visible memory band of the layout (see the module docstring)."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__(theme)
        self.layout: LaneLayout | None = None
        self.curves: list[MemoryCurve | None] = []
        self._font = QFont()
        self._font.setPointSizeF(8.0)

    def set_data(self, layout: LaneLayout | None, curves: list[MemoryCurve | None], extent: QRectF) -> None:
        self.layout = layout
        self.curves = curves
        self.set_extent(extent)

    def bands(self, first_row: int, last_row: int) -> list[tuple[int, int]]:
        """(rank index, first row) of every memory band that overlaps rows [first_row, last_row)."""
        out = []
        if self.layout is None:
            return out
        for r in range(max(0, first_row - MEMORY_ROWS), min(len(self.layout.rows), last_row)):
            row = self.layout.rows[r]
            if row.kind == RowKind.MEMORY and row.depth == 0:
                out.append((row.rank_index, r))
        return out

    def paint(self, p: QPainter, opt: object, widget: object = None) -> None:
        vb = self.getViewBox()
        if vb is None or self.layout is None or not self.curves:
            return
        view = vb.viewRect()
        tr = p.transform()
        sx, ox, sy, oy = tr.m11(), tr.dx(), tr.m22(), tr.dy()
        px = 1.0 / max(abs(sx), 1e-12)
        lo, hi = view.left(), view.right()
        y_lo, y_hi = sorted((view.top(), view.bottom()))
        p.save()
        p.resetTransform()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        p.setFont(self._font)
        fm = QFontMetricsF(self._font)
        for ri, r in self.bands(int(y_lo), int(y_hi) + 1):
            curve = self.curves[ri] if ri < len(self.curves) else None
            if curve is None:
                continue
            top = (r + 0.15) * sy + oy
            bottom = (r + MEMORY_ROWS - 0.1) * sy + oy
            h = bottom - top

            def ys(
                v: np.ndarray, curve: MemoryCurve = curve, bottom: float = bottom, h: float = h
            ) -> np.ndarray:
                return bottom - v / curve.top * h

            x, v = step_points(curve.ms, curve.allocated, lo, hi, px)
            if len(x):
                xs = x * sx + ox
                poly = QPolygonF([QPointF(a, b) for a, b in zip(xs.tolist(), ys(v).tolist())])
                fill = QPolygonF(poly)
                fill.append(QPointF(float(xs[-1]), bottom))
                fill.append(QPointF(float(xs[0]), bottom))
                color = QColor(ALLOCATED)
                color.setAlpha(70)
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(color)
                p.drawPolygon(fill)
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.setPen(QPen(QColor(ALLOCATED), 1.2))
                p.drawPolyline(poly)
            if curve.reserved.any():
                x, v = step_points(curve.ms, curve.reserved, lo, hi, px)
                if len(x):
                    xs = x * sx + ox
                    pen = QPen(QColor(RESERVED), 1.2)
                    pen.setStyle(Qt.PenStyle.DashLine)
                    p.setPen(pen)
                    p.drawPolyline(QPolygonF([QPointF(a, b) for a, b in zip(xs.tolist(), ys(v).tolist())]))
            # the peak: a marker and its label
            xp = curve.peak_ms * sx + ox
            yp = float(ys(np.asarray([curve.peak_bytes], np.float64))[0])
            if lo - px <= curve.peak_ms <= hi + px:
                p.setPen(QPen(QColor(PEAK), 1.0, Qt.PenStyle.DotLine))
                p.drawLine(QPointF(xp, top), QPointF(xp, bottom))
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(QColor(PEAK))
                p.drawPolygon(
                    QPolygonF([QPointF(xp - 4, yp - 7), QPointF(xp + 4, yp - 7), QPointF(xp, yp - 1)])
                )
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.setPen(QColor(PEAK))
                w = fm.horizontalAdvance(curve.label) + 4
                x_text = xp + 6 if xp + 6 + w < hi * sx + ox else xp - 6 - w
                p.drawText(
                    QRectF(x_text, top - 2, w, fm.height()), int(Qt.AlignmentFlag.AlignLeft), curve.label
                )
        p.restore()
