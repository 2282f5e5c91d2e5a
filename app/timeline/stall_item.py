"""Unexplained GPU delays drawn on their stream's lane: a hatched band from where the stream could
have started the task to where it did (:mod:`lumos_core.replay.idle`), with a tooltip that says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen

from app.theme import LIGHT, Theme
from app.timeline.extent_item import ExtentItem
from app.timeline.lane_layout import LaneLayout
from app.view_model.loaded_job import LoadedJob

HATCH = "#D62728"
MIN_DRAWN_NS = 1_000  # shorter delays are noise in the timestamps (µs-rounded)


@dataclass(frozen=True)
class Stall:
    rank_index: int
    lane: int
    start_ms: float
    end_ms: float
    task: str

    def describe(self) -> str:
        us = (self.end_ms - self.start_ms) * 1000
        return (
            f"unexplained delay: {us:,.1f} µs\n{self.task[:120]} started later than every dependency "
            "allows\n(another process on the GPU, throttling, a profiler flush; --keep-stalls replays it)"
        )


def stalls_of(loaded: LoadedJob) -> list[Stall]:
    """The job's unexplained delays, placed on the lane of the task that started late."""
    if loaded.idle is None:
        return []
    index = {t.rank: i for i, t in enumerate(loaded.job.ranks)}
    out = []
    for d in loaded.idle.delays:
        ri = index.get(d.rank)
        if ri is None or d.event < 0 or d.length < MIN_DRAWN_NS:
            continue
        t = loaded.job.ranks[ri]
        out.append(Stall(ri, int(t.lane[d.event]), d.start / 1e6, (d.start + d.length) / 1e6, d.task))
    return out


class StallItem(ExtentItem):
    """Hatched bands over the lanes (drawn above the tasks, below the selection overlay)."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__(theme)
        self.layout: LaneLayout | None = None
        self.stalls: list[Stall] = []

    def set_data(self, layout: LaneLayout | None, stalls: list[Stall], extent: QRectF) -> None:
        self.layout = layout
        self.stalls = stalls
        self.set_extent(extent)

    def row_of(self, s: Stall) -> int:
        if self.layout is None:
            return -1
        row = self.layout.row_showing(s.rank_index, s.lane, 0)
        if row < 0 or self.layout.rows[row].lane != s.lane:
            return -1  # its stream is collapsed into the rank header: nothing to hatch
        return row

    def stall_at(self, x_ms: float, y: float, slack_ms: float = 0.0) -> Stall | None:
        for s in self.stalls:
            if s.start_ms - slack_ms <= x_ms <= s.end_ms + slack_ms and self.row_of(s) == int(y):
                return s
        return None

    def paint(self, p: QPainter, opt: object, widget: object = None) -> None:
        vb = self.getViewBox()
        if vb is None or self.layout is None or not self.stalls:
            return
        view = vb.viewRect()
        lo, hi = view.left(), view.right()
        y_lo, y_hi = sorted((view.top(), view.bottom()))
        tr = p.transform()
        sx, ox, sy, oy = tr.m11(), tr.dx(), tr.m22(), tr.dy()
        p.save()
        p.resetTransform()
        color = QColor(HATCH)
        brush = QBrush(color, Qt.BrushStyle.BDiagPattern)
        pen = QPen(color, 1.0)
        p.setPen(pen)
        p.setBrush(brush)
        for s in self.stalls:
            if s.end_ms < lo or s.start_ms > hi:
                continue
            row = self.row_of(s)
            if row < 0 or not y_lo - 1 <= row <= y_hi + 1:
                continue
            x0 = s.start_ms * sx + ox
            x1 = max(s.end_ms * sx + ox, x0 + 3.0)  # visible at any zoom
            y0 = (row + 0.1) * sy + oy
            y1 = (row + 0.9) * sy + oy
            p.drawRect(QRectF(x0, min(y0, y1), x1 - x0, abs(y1 - y0)))
        p.restore()
