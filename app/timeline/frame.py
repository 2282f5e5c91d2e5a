"""A frame of the timeline: every span, band, line and label in view, computed with numpy in device
coordinates and drawn with one ``QPainter.drawRects`` call per colour (no item or brush per event).

Rectangles are clipped to the view in data space, then mapped to pixels with numpy, so nothing is
ever handed to Qt at coordinates far outside the screen (where pyqtgraph bars vanish) and deep zoom
keeps float64 precision. :class:`~app.timeline.span_item.TimelineItem` caches the frame until the
view, the layout or the highlights change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QLineF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPen
from shiboken6 import wrapInstance

from app.theme import Theme
from app.timeline.lane_layout import LaneLayout, RowKind
from app.view_model.lane_data import RowTable, Spans
from app.view_model.layer import IterationMark, Layer, LayerStyle
from app.view_model.row_tables import ready_table
from lumos_core.api.views import N_FAMILIES
from lumos_core.trace.model import RankTrace

MAX_LABELS = 600  # text labels per frame; beyond that text only costs time and reads as noise
MIN_LABEL_PX = 36.0
OUTLINE_SIDES_PX = 4.0  # outlined spans narrower than this get rails only, no sides


@dataclass
class Frame:
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
    # (layer, rank index) whose row tables are not built yet: those of rows in view first (drawn
    # empty, "loading"), then those of the rows a screen above and below (asked for ahead)
    missing: list[tuple[int, int]] = field(default_factory=list)
    n_missing_in_view: int = 0


def draw_rects(p: QPainter, rects: np.ndarray) -> None:
    """One native drawRects over a contiguous (n, 4) float64 array of x, y, w, h."""
    if len(rects):
        arr = np.ascontiguousarray(rects, dtype=np.float64)
        p.drawRects(wrapInstance(arr.ctypes.data, QRectF), len(arr))


def outline_lines(rects: np.ndarray, min_sides_px: float = OUTLINE_SIDES_PX) -> np.ndarray:
    """An outline as lines: a rail above and below every rect, and the left and right sides only
    where the rect is at least ``min_sides_px`` wide. A predicted layer drawn over the measured
    one sits just outside the measured bars (its band is taller), so its rails never cover a bar,
    and a box around a task one or two pixels wide, which would paint it over in the outline's
    colour, is never drawn."""
    x, y, w, h = (rects[:, k] for k in range(4))
    parts = [np.column_stack([x, y, x + w, y]), np.column_stack([x, y + h, x + w, y + h])]
    wide = w >= min_sides_px
    if wide.any():
        xw, yw, ww, hw = x[wide], y[wide], w[wide], h[wide]
        parts += [np.column_stack([xw, yw, xw, yw + hw]), np.column_stack([xw + ww, yw, xw + ww, yw + hw])]
    return np.concatenate(parts)


def moved_spans(
    sp: Spans, deviation: list[np.ndarray | None] | None, rank_index: int, min_ms: float
) -> Spans:
    """The spans whose task (a merged span: its longest task) moved at least ``min_ms``."""
    dev = deviation[rank_index] if deviation is not None and rank_index < len(deviation) else None
    if dev is None:
        return sp
    keep = dev[sp.lead] >= min_ms
    return Spans(sp.start[keep], sp.end[keep], sp.family[keep], sp.lead[keep])


def draw_lines(p: QPainter, lines: np.ndarray) -> None:
    if len(lines):
        arr = np.ascontiguousarray(lines, dtype=np.float64)
        p.drawLines(wrapInstance(arr.ctypes.data, QLineF), len(arr))


def build_frame(
    layers: list[Layer],
    layout: LaneLayout,
    iterations: list[list[IterationMark]],
    match_masks: list[np.ndarray | None],
    theme: Theme,
    font: QFont,
    view: QRectF,
    sx: float,
    ox: float,
    sy: float,
    oy: float,
) -> Frame:
    """Everything in ``view`` as device-space arrays, one per colour (see the module docstring)."""
    vx0, vx1 = view.left(), view.right()
    px = 1.0 / max(abs(sx), 1e-12)  # ms per device pixel
    lo, hi = vx0 - 2 * px, vx1 + 2 * px
    y_lo, y_hi = sorted((view.top(), view.bottom()))
    r0 = max(0, math.floor(y_lo))
    r1 = min(len(layout.rows), math.ceil(y_hi))
    x_left, x_right = vx0 * sx + ox, vx1 * sx + ox
    width_dev = x_right - x_left
    fm = QFontMetricsF(font)

    chunks: list[list[tuple[np.ndarray, np.ndarray, float, float, np.ndarray]]] = [[] for _ in layers]
    labels: list[tuple[QRectF, str, int]] = []
    highlight_parts: list[np.ndarray] = []
    header_bands: list[tuple[float, float]] = []
    missing: dict[tuple[int, int], None] = {}  # ordered set
    loading_rows: list[float] = []  # device y of rows waiting for their tables
    n_spans = 0
    for r in range(r0, r1):
        row = layout.rows[r]
        top = r * sy + oy
        h = sy
        if row.kind == RowKind.RANK:
            header_bands.append((top, h))
        for li, layer in enumerate(layers):
            if row.layer is not None and row.layer != li:
                continue  # a row of another layer (paired or single-layer layouts)
            table = ready_table(layer.tables, row.rank_index)
            if table is None:  # built on a worker when asked for (see app.view_model.row_tables)
                missing[(li, row.rank_index)] = None
                if row.sources and (not loading_rows or loading_rows[-1] != top):
                    loading_rows.append(top)
                continue
            rank = layer.ranks[row.rank_index]
            st = layer.style
            y = top + h * st.y0
            hh = max(h * st.height, 1.0)
            for si, src in enumerate(row.sources):
                ti = table.row_of.get(src)
                if ti is None:
                    continue
                sp = table.spans(ti, lo, hi, px)
                if st.min_diff_px > 0 and len(sp):
                    sp = moved_spans(sp, layer.deviation, row.rank_index, st.min_diff_px * px)
                if not len(sp):
                    continue
                n_spans += len(sp)
                xs = np.clip(sp.start, lo, hi) * sx + ox
                xe = np.clip(sp.end, lo, hi) * sx + ox
                chunks[li].append((xs, np.maximum(xe - xs, 1.0), y, hh, sp.family))
                # rows that overlay several lanes (collapsed) label only the first: text would collide
                if st.labels and si == 0 and len(labels) < MAX_LABELS and h >= 11:
                    collect_labels(labels, fm, rank, table, sp, lo, hi, sx, ox, y, hh, x_left, x_right)
                masks = match_masks
                if li == 0 and row.rank_index < len(masks) and masks[row.rank_index] is not None:
                    collect_highlights(
                        highlight_parts,
                        table,
                        match_masks[row.rank_index],
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
        marks = iterations[ri] if ri < len(iterations) else []
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
    n_missing_in_view = len(missing)
    margin = max(r1 - r0, 1)  # the rows a screen above and below are asked for ahead of a scroll
    for r in (*range(max(0, r0 - margin), r0), *range(r1, min(len(layout.rows), r1 + margin))):
        row = layout.rows[r]
        if not row.sources:
            continue
        for li, layer in enumerate(layers):
            if (row.layer is None or row.layer == li) and ready_table(layer.tables, row.rank_index) is None:
                missing[(li, row.rank_index)] = None
    for top in loading_rows:
        header_texts.append((QRectF(x_left + 4, top, max(width_dev - 8, 1.0), sy), "loading lanes…"))
    band_colors.append((theme.group_band, np.asarray(group_rects, np.float64).reshape(-1, 4)))
    hb = np.asarray([(x_left, t, width_dev, h) for t, h in header_bands], np.float64).reshape(-1, 4)
    band_colors.append((theme.header_band, hb))
    return Frame(
        rects=rects,
        layer_styles=[ly.style for ly in layers],
        layer_of_chunk=layer_of_chunk,
        band_colors=band_colors,
        lines=np.asarray(lines, np.float64).reshape(-1, 4),
        separators=np.asarray(seps, np.float64).reshape(-1, 4),
        labels=labels,
        header_texts=header_texts,
        highlights=np.concatenate(highlight_parts) if highlight_parts else np.zeros((0, 4)),
        n_spans=n_spans,
        missing=list(missing),
        n_missing_in_view=n_missing_in_view,
    )


def collect_labels(
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


def collect_highlights(
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


def paint_frame(p: QPainter, fr: Frame, theme: Theme, font: QFont) -> None:
    """Draw a built frame: bands, separators, spans, iteration lines, highlights, labels."""
    th = theme
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
            draw_lines(p, outline_lines(arr))
            continue
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
        p.setFont(font)
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for rect, text, fam in fr.labels:
            p.setPen(th.text_on(fam))
            p.drawText(rect, flags, text)
    if fr.header_texts:
        p.setFont(font)
        p.setPen(QColor(th.muted))
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for rect, text in fr.header_texts:
            p.drawText(rect, flags, text)
