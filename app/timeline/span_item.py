"""Graphics items that draw the timeline: spans of every visible row, and a light overlay.

:class:`TimelineItem` draws, for the rows in view, the level-of-detail spans of each layer with
one ``QPainter.drawRects`` call per colour over a numpy-built QRectF array (no item per event,
no per-bar brushes). It works in *device* coordinates: rectangles are clipped to the view in data
space, then mapped to pixels with numpy, so nothing is ever handed to Qt at coordinates far outside
the screen (where pyqtgraph bars vanish) and deep zoom keeps float64 precision. The computed frame is
cached until the view, the layout or the highlights change, so hover repaints cost a few drawRects.

:class:`OverlayItem` draws what changes on interaction: the selected task, the arrow from its launch
call, the measured span.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPen, QPolygonF
from shiboken6 import wrapInstance

from app.theme import LIGHT, Theme
from app.timeline.lane_data import RowTable, Spans
from app.timeline.lane_layout import LaneLayout, RowKind
from lumos_core.trace.kernel_families import N_FAMILIES
from lumos_core.trace.model import RankTrace

MAX_LABELS = 600  # text labels per frame; beyond that text only costs time and reads as noise
MIN_LABEL_PX = 36.0


@dataclass(frozen=True)
class LayerStyle:
    """How a layer sits in its row: vertical band (fractions of the row), opacity, outline only."""

    y0: float = 0.1
    height: float = 0.8
    opacity: float = 1.0
    outline: bool = False
    labels: bool = True
    color: str | None = None  # one colour for every span (a ghost), instead of the family colours


@dataclass
class Layer:
    """A set of per-rank row tables drawn into the shared layout (measured, or later predicted)."""

    name: str
    ranks: list[RankTrace]
    tables: list[RowTable]
    style: LayerStyle = field(default_factory=LayerStyle)


@dataclass
class IterationMark:
    name: str
    start_ms: float
    end_ms: float


@dataclass
class _Frame:
    rects: list[tuple[int, np.ndarray]]  # (family, (n, 4) device rects), per layer in order
    layer_styles: list[LayerStyle]
    layer_of_chunk: list[int]
    band_colors: list[tuple[str, np.ndarray]]  # header and alternate-group backgrounds
    lines: np.ndarray  # iteration boundaries (n, 4)
    separators: np.ndarray  # rank group separators (n, 4)
    labels: list[tuple[QRectF, str, int]]  # rect, text, family
    header_texts: list[tuple[QRectF, str]]
    highlights: np.ndarray  # (n, 4) search matches
    n_spans: int


def draw_rects(p: QPainter, rects: np.ndarray) -> None:
    """One native drawRects over a contiguous (n, 4) float64 array of x, y, w, h."""
    if len(rects):
        arr = np.ascontiguousarray(rects, dtype=np.float64)
        p.drawRects(wrapInstance(arr.ctypes.data, QRectF), len(arr))


def draw_lines(p: QPainter, lines: np.ndarray) -> None:
    if len(lines):
        arr = np.ascontiguousarray(lines, dtype=np.float64)
        p.drawLines(wrapInstance(arr.ctypes.data, QLineF), len(arr))


class TimelineItem(pg.GraphicsObject):
    """All rows of the timeline in one item (see module docstring)."""

    sigPainted = Signal(float)  # seconds the paint took

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.theme = theme
        self.layers: list[Layer] = []
        self.layout: LaneLayout | None = None
        self.iterations: list[list[IterationMark]] = []
        self.match_masks: list[np.ndarray | None] = []  # per rank, over layer 0's table indices
        self._extent = QRectF(0, 0, 1, 1)
        self._frame: _Frame | None = None
        self._key: tuple | None = None
        self._version = 0
        self.last_paint_s = 0.0
        self.last_span_count = 0
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
        x1 = 0.0
        for layer in layers:
            for t in layer.tables:
                if len(t):
                    x1 = max(x1, float(t.end.max()))
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

    # ---- QGraphicsItem
    def boundingRect(self) -> QRectF:
        # generous: the item paints whatever part of the scene is in view
        r = self._extent
        pad = max(r.width(), 1.0)
        return QRectF(r.left() - pad, -1.0, r.width() + 2 * pad, r.height() + 2.0)

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
            self._frame = self._build_frame(view, tr.m11(), tr.dx(), tr.m22(), tr.dy())
            self._key = key
        p.save()
        p.resetTransform()
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        self._paint_frame(p, self._frame)
        p.restore()
        self.last_paint_s = time.perf_counter() - t0
        self.last_span_count = self._frame.n_spans
        self.sigPainted.emit(self.last_paint_s)

    # ---- frame building (numpy, no Qt calls per event)
    def _build_frame(self, view: QRectF, sx: float, ox: float, sy: float, oy: float) -> _Frame:
        layout = self.layout
        assert layout is not None
        vx0, vx1 = view.left(), view.right()
        px = 1.0 / max(abs(sx), 1e-12)  # ms per device pixel
        lo, hi = vx0 - 2 * px, vx1 + 2 * px
        y_lo, y_hi = sorted((view.top(), view.bottom()))
        r0 = max(0, math.floor(y_lo))
        r1 = min(len(layout.rows), math.ceil(y_hi))
        x_left, x_right = vx0 * sx + ox, vx1 * sx + ox
        width_dev = x_right - x_left
        fm = QFontMetricsF(self._font)

        chunks: list[list[tuple[np.ndarray, np.ndarray, float, float, np.ndarray]]] = [
            [] for _ in self.layers
        ]
        labels: list[tuple[QRectF, str, int]] = []
        highlight_parts: list[np.ndarray] = []
        header_bands: list[tuple[float, float]] = []
        n_spans = 0
        for r in range(r0, r1):
            row = layout.rows[r]
            top = r * sy + oy
            h = sy
            if row.kind == RowKind.RANK:
                header_bands.append((top, h))
            for li, layer in enumerate(self.layers):
                if row.layer is not None and row.layer != li:
                    continue  # a row of another layer (paired or single-layer layouts)
                table = layer.tables[row.rank_index]
                rank = layer.ranks[row.rank_index]
                st = layer.style
                y = top + h * st.y0
                hh = max(h * st.height, 1.0)
                for si, src in enumerate(row.sources):
                    ti = table.row_of.get(src)
                    if ti is None:
                        continue
                    sp = table.spans(ti, lo, hi, px)
                    if not len(sp):
                        continue
                    n_spans += len(sp)
                    xs = np.clip(sp.start, lo, hi) * sx + ox
                    xe = np.clip(sp.end, lo, hi) * sx + ox
                    chunks[li].append((xs, np.maximum(xe - xs, 1.0), y, hh, sp.family))
                    # rows that overlay several lanes (collapsed) label only the first: text would collide
                    if st.labels and si == 0 and len(labels) < MAX_LABELS and h >= 11:
                        self._collect_labels(
                            labels, fm, rank, table, sp, lo, hi, sx, ox, y, hh, x_left, x_right
                        )
                    masks = self.match_masks
                    if li == 0 and row.rank_index < len(masks) and masks[row.rank_index] is not None:
                        self._collect_highlights(
                            highlight_parts,
                            table,
                            self.match_masks[row.rank_index],
                            ti,
                            lo,
                            hi,
                            sx,
                            ox,
                            y,
                            hh,
                        )

        rects: list[tuple[int, np.ndarray]] = []
        layer_of_chunk: list[int] = []
        for li, parts in enumerate(chunks):
            if not parts:
                continue
            xs = np.concatenate([c[0] for c in parts])
            ws = np.concatenate([c[1] for c in parts])
            ys = np.concatenate([np.full(len(c[0]), c[2]) for c in parts])
            hs = np.concatenate([np.full(len(c[0]), c[3]) for c in parts])
            fam = np.concatenate([c[4] for c in parts]).astype(np.int64)
            order = np.argsort(fam, kind="stable")
            packed = np.column_stack([xs, ys, ws, hs])[order]
            counts = np.bincount(fam, minlength=N_FAMILIES)
            bounds = np.r_[0, np.cumsum(counts)]
            for f in np.flatnonzero(counts):
                rects.append((int(f), packed[bounds[f] : bounds[f + 1]]))
                layer_of_chunk.append(li)

        # rank groups: alternate background, header band, separators, iteration boundaries
        band_colors: list[tuple[str, np.ndarray]] = []
        group_rects, lines, seps, header_texts = [], [], [], []
        shown = layout.order if layout.order is not None else range(len(layout.group_bounds))
        place = {ri: k for k, ri in enumerate(shown)}  # alternate by position on screen
        for ri, (first, end) in enumerate(layout.group_bounds):
            if end <= r0 or first >= r1 or ri not in place:
                continue
            gy0 = first * sy + oy
            gy1 = end * sy + oy
            if place[ri] % 2 == 1:
                group_rects.append((x_left, gy0, width_dev, gy1 - gy0))
            seps.append((x_left, gy0, x_right, gy0))
            marks = self.iterations[ri] if ri < len(self.iterations) else []
            for k, m in enumerate(marks):
                xa = m.start_ms * sx + ox
                if x_left - 1 <= xa <= x_right + 1:
                    lines.append((xa, gy0, xa, gy1))
                if k == len(marks) - 1:
                    xb = m.end_ms * sx + ox
                    if x_left - 1 <= xb <= x_right + 1:
                        lines.append((xb, gy0, xb, gy1))
                if first >= r0:
                    xa_c = max(xa, x_left) + 4
                    xb = m.end_ms * sx + ox
                    room = min(xb, x_right) - xa_c - 4
                    text = f"{m.name} · {(m.end_ms - m.start_ms):.1f} ms"
                    if room > fm.horizontalAdvance(text):
                        header_texts.append((QRectF(xa_c, gy0, room, sy), text))
                    elif room > fm.horizontalAdvance(m.name):
                        header_texts.append((QRectF(xa_c, gy0, room, sy), m.name))
        band_colors.append((self.theme.group_band, np.asarray(group_rects, np.float64).reshape(-1, 4)))
        hb = np.asarray([(x_left, t, width_dev, h) for t, h in header_bands], np.float64).reshape(-1, 4)
        band_colors.append((self.theme.header_band, hb))
        return _Frame(
            rects=rects,
            layer_styles=[ly.style for ly in self.layers],
            layer_of_chunk=layer_of_chunk,
            band_colors=band_colors,
            lines=np.asarray(lines, np.float64).reshape(-1, 4),
            separators=np.asarray(seps, np.float64).reshape(-1, 4),
            labels=labels,
            header_texts=header_texts,
            highlights=np.concatenate(highlight_parts) if highlight_parts else np.zeros((0, 4)),
            n_spans=n_spans,
        )

    def _collect_labels(
        self,
        labels: list[tuple[QRectF, str, int]],
        fm: QFontMetricsF,
        rank: RankTrace,
        table: RowTable,
        sp: Spans,
        lo: float,
        hi: float,
        sx: float,
        ox: float,
        y: float,
        hh: float,
        x_left: float,
        x_right: float,
    ) -> None:
        """Name every span whose longest event is wide enough on screen, inside that event."""
        lead = sp.lead
        xs = np.clip(table.start[lead], lo, hi) * sx + ox
        xe = np.clip(table.end[lead], lo, hi) * sx + ox
        vis_l = np.maximum(xs, x_left)
        vis_r = np.minimum(xe, x_right)
        wide = np.flatnonzero(vis_r - vis_l >= MIN_LABEL_PX)
        for k in wide[: MAX_LABELS - len(labels)]:
            ev = int(table.event[int(lead[k])])
            name = rank.strings[int(rank.name[ev])]
            rect = QRectF(float(vis_l[k]) + 3, y, float(vis_r[k] - vis_l[k]) - 6, hh)
            text = fm.elidedText(name, Qt.TextElideMode.ElideRight, rect.width())
            if text and text != "…":
                labels.append((rect, text, int(sp.family[k])))

    @staticmethod
    def _collect_highlights(
        parts: list[np.ndarray],
        table: RowTable,
        mask: np.ndarray,
        ti: int,
        lo: float,
        hi: float,
        sx: float,
        ox: float,
        y: float,
        hh: float,
    ) -> None:
        i0, i1 = table.window(ti, lo, hi)
        hit = np.flatnonzero(mask[i0:i1]) + i0
        if len(hit) == 0:
            return
        xs = np.clip(table.start[hit], lo, hi) * sx + ox
        xe = np.clip(table.end[hit], lo, hi) * sx + ox
        w = np.maximum(xe - xs, 3.0)
        parts.append(np.column_stack([xs - 1, np.full(len(hit), y - 1), w + 2, np.full(len(hit), hh + 2)]))

    # ---- painting
    def _paint_frame(self, p: QPainter, fr: _Frame) -> None:
        th = self.theme
        p.setPen(Qt.PenStyle.NoPen)
        for color, arr in fr.band_colors:
            if len(arr):
                p.setBrush(QBrush(QColor(color)))
                draw_rects(p, arr)
        sep_pen = QPen(QColor(th.grid))
        sep_pen.setCosmetic(True)
        p.setPen(sep_pen)
        draw_lines(p, fr.separators)
        for (fam, arr), li in zip(fr.rects, fr.layer_of_chunk):
            st = fr.layer_styles[li]
            color = QColor(st.color) if st.color else QColor(th.family_color(fam))
            if st.opacity < 1.0:
                color.setAlphaF(st.opacity)
            if st.outline:
                pen = QPen(color)
                pen.setCosmetic(True)
                p.setPen(pen)
                p.setBrush(Qt.BrushStyle.NoBrush)
            else:
                p.setPen(Qt.PenStyle.NoPen)
                p.setBrush(QBrush(color))
            draw_rects(p, arr)
        if len(fr.lines):
            pen = QPen(QColor(th.iteration_line))
            pen.setStyle(Qt.PenStyle.DashLine)
            pen.setCosmetic(True)
            p.setPen(pen)
            draw_lines(p, fr.lines)
        if len(fr.highlights):
            pen = QPen(QColor(th.search_highlight))
            pen.setWidthF(2.0)
            pen.setCosmetic(True)
            p.setPen(pen)
            p.setBrush(Qt.BrushStyle.NoBrush)
            draw_rects(p, fr.highlights)
        if fr.labels:
            p.setFont(self._font)
            flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            for rect, text, fam in fr.labels:
                p.setPen(th.text_on(fam))
                p.drawText(rect, flags, text)
        if fr.header_texts:
            p.setFont(self._font)
            p.setPen(QColor(th.muted))
            flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            for rect, text in fr.header_texts:
                p.drawText(rect, flags, text)


@dataclass
class Marker:
    """Something the overlay draws, in data coordinates (ms, rows)."""

    x0: float
    x1: float
    row: int


class OverlayItem(pg.GraphicsObject):
    """Selection outline, launch → kernel arrow, measured span (cheap to repaint)."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.theme = theme
        self.selection: Marker | None = None
        self.arrow: tuple[QPointF, QPointF] | None = None  # data coordinates
        self.measure: tuple[float, float] | None = None
        self._extent = QRectF(0, 0, 1, 1)
        self._font = QFont()
        self._font.setPointSizeF(8.5)
        self._font.setBold(True)

    def set_extent(self, extent: QRectF) -> None:
        self.prepareGeometryChange()
        self._extent = QRectF(extent)
        self.update()

    def boundingRect(self) -> QRectF:
        r = self._extent
        pad = max(r.width(), 1.0)
        return QRectF(r.left() - pad, -1.0, r.width() + 2 * pad, r.height() + 2.0)

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
