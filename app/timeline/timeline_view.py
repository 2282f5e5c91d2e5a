"""The timeline widget: every rank's lanes on one time axis, with Perfetto-like navigation.

Mouse: wheel zooms the time axis at the cursor, Shift+wheel (or wheel over the labels) scrolls the
rows, drag pans, Shift+drag measures a span, click selects, double-click zooms to a task.
Keys: W/S zoom, A/D pan, F zoom to the selection (or measured span), 0/Home reset, [ and ] step
through iterations, Esc clears, N/P next/previous search match.

Rows have a fixed height in pixels; the y range follows the widget's height so resizing shows more
rows instead of stretching them. The x axis is milliseconds since the job's aligned start.

A *prediction* (:meth:`TimelineView.set_prediction`) adds the predicted ranks of a replay or an
estimate as a second layer, drawn in one of :data:`OVERLAY_MODES`: a ghost outline on the measured
tasks, a predicted row under every measured row, or the predicted ranks alone. Picking, selection
and hover work on both layers (:attr:`Hit.layer`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QFont, QFontMetricsF, QKeyEvent, QPainter, QPen
from PySide6.QtWidgets import QHBoxLayout, QScrollBar, QToolTip, QWidget

from app.loaded_job import LoadedJob
from app.theme import LIGHT, Theme
from app.timeline.lane_data import RowTable, empty_table
from app.timeline.lane_layout import LaneLayout, RowKind
from app.timeline.overlay_data import PredictedOverlay, measured_marks
from app.timeline.span_item import (
    IterationMark,
    Layer,
    LayerStyle,
    Marker,
    OverlayItem,
    TimelineItem,
    format_duration_ms,
)
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Kind, RankTrace

ROW_PX = 20
LABEL_WIDTH = 260
_ZOOM_STEP = 0.8
_PAN_STEP = 0.15
_MIN_RANGE_MS = 1e-5  # 10 ns

MEASURED, PREDICTED = 0, 1  # layer indices
OVERLAY_MODES: dict[str, str] = {
    "ghost": "Ghost: predicted outlined over measured",
    "paired": "Paired: measured row, predicted row below",
    "predicted": "Predicted ranks only",
}
# The ghost outline: one colour that stands out against every family colour in either theme.
GHOST_COLOR = {"light": "#111827", "dark": "#F5F5F5"}
PREDICTED_LABEL_COLOR = {"light": "#6D28D9", "dark": "#C4B5FD"}


@dataclass(frozen=True)
class Hit:
    """A task on screen: rank index (into job.ranks), event index (into that rank's table) and
    layer: 0 the measured rank, 1 the predicted rank drawn in its rows (same event indices)."""

    rank_index: int
    event: int
    layer: int = MEASURED


class TimelineViewBox(pg.ViewBox):
    """Wheel zooms x at the cursor, drag pans both axes, Shift+drag measures."""

    sigMeasure = Signal(float, float, bool)  # start ms, end ms, finished

    def __init__(self, view: TimelineView) -> None:
        super().__init__(invertY=True, enableMenu=False, defaultPadding=0.0)
        self._view = view
        self._measuring = False

    def wheelEvent(self, ev, axis=None):  # type: ignore[no-untyped-def]
        steps = ev.delta() / 120.0
        if axis == 1 or ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self._view.scroll_rows(-3 * steps)
        else:
            self._view.zoom(_ZOOM_STEP**steps, self.mapToView(ev.pos()).x())
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

    def __init__(self, view: TimelineView, plot_item: pg.PlotItem) -> None:
        super().__init__(plotItem=plot_item)
        self._view = view
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def keyPressEvent(self, ev: QKeyEvent) -> None:
        if not self._view.handle_key(ev):
            super().keyPressEvent(ev)


class TimelineView(QWidget):
    """Rows of all ranks, navigation, hover, selection and search (see module docstring)."""

    selection_changed = Signal(object)  # Hit or None
    hovered = Signal(str)
    measured = Signal(float, float)
    view_changed = Signal()
    first_paint = Signal(float)  # seconds the first paint of a new job took

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.loaded: LoadedJob | None = None
        self.layout_model: LaneLayout | None = None
        self.selected: Hit | None = None
        self.hover_hit: Hit | None = None
        self.matches: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.match_index = -1
        self._inverse: dict[int, np.ndarray] = {}
        self._iteration_spans: list[IterationMark] = []
        self._iteration_cursor = -1
        self._awaiting_first_paint = False
        self._syncing_scrollbar = False
        self.prediction: PredictedOverlay | None = None
        self.overlay_mode = "ghost"
        self.show_measured_marks = True
        self.show_reference = True  # measured ranks below predicted ranks built anew
        self._match_masks: list[np.ndarray | None] = []

        self.view_box = TimelineViewBox(self)
        self.label_axis = LaneLabelAxis(theme)
        self.time_axis = pg.AxisItem("top")
        self.time_axis.enableAutoSIPrefix(False)
        self.time_axis.setLabel("time since job start (ms)")
        plot_item = pg.PlotItem(
            viewBox=self.view_box, axisItems={"left": self.label_axis, "top": self.time_axis}
        )
        plot_item.hideAxis("bottom")
        plot_item.showAxis("top")
        plot_item.hideButtons()
        plot_item.setMenuEnabled(False)
        plot_item.layout.setContentsMargins(0, 0, 4, 0)
        self.plot_item = plot_item
        self.canvas = TimelineCanvas(self, plot_item)
        self.canvas.setAntialiasing(False)
        self.item = TimelineItem(theme)
        self.overlay = OverlayItem(theme)
        self.view_box.addItem(self.item, ignoreBounds=True)
        self.view_box.addItem(self.overlay, ignoreBounds=True)
        self.overlay.setZValue(10)
        self.scrollbar = QScrollBar(Qt.Orientation.Vertical)
        self.scrollbar.setSingleStep(1)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.canvas, 1)
        lay.addWidget(self.scrollbar)

        self.view_box.sigResized.connect(self._keep_row_height)
        self.view_box.sigRangeChanged.connect(self._on_range_changed)
        self.view_box.sigMeasure.connect(self._on_measure)
        self.label_axis.sigRowClicked.connect(self.toggle_row)
        self.scrollbar.valueChanged.connect(self._on_scrollbar)
        scene = self.canvas.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)
        self.item.sigPainted.connect(self._on_painted)
        self.apply_theme(theme)

    # ------------------------------------------------------------------ data
    def set_job(self, loaded: LoadedJob | None) -> None:
        self.loaded = loaded
        self.prediction = None
        self._match_masks = []
        self.selected = None
        self.hover_hit = None
        self._inverse = {}
        self.matches = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.match_index = -1
        self.overlay.selection = None
        self.overlay.arrow = None
        self.overlay.measure = None
        if loaded is None:
            self.layout_model = None
            self.label_axis.layout_model = None
            self.item.layers = []
            self.item.invalidate()
            self.overlay.update()
            return
        ranks = loaded.job.ranks
        self.layout_model = LaneLayout(ranks, loaded.tables)
        self.label_axis.layout_model = self.layout_model
        marks = measured_marks(loaded)
        self.item.set_data([Layer("measured", ranks, loaded.tables)], self.layout_model, marks)
        self.overlay.set_extent(self.item.data_extent())
        self._iteration_spans = _job_iterations(marks)
        self._iteration_cursor = -1
        self._awaiting_first_paint = True
        self._update_scrollbar()
        self.reset_view()
        self.selection_changed.emit(None)

    @property
    def iteration_names(self) -> list[str]:
        return [m.name for m in self._iteration_spans]

    # ------------------------------------------------------------------ prediction overlay
    def set_prediction(self, prediction: PredictedOverlay | None, mode: str | None = None) -> None:
        """Draw ``prediction`` (None: the measured job alone) in ``mode`` (one of OVERLAY_MODES;
        None keeps the current one). Keeps the visible time range, rows and collapsed groups."""
        if mode is not None:
            if mode not in OVERLAY_MODES:
                raise ValueError(f"unknown overlay mode {mode!r}")
            self.overlay_mode = mode
        self.prediction = prediction
        if self.selected is not None and self.selected.layer == PREDICTED:
            self.selected = None
            self.selection_changed.emit(None)
        self.hover_hit = None
        self._apply_layers()

    def set_overlay_mode(self, mode: str) -> None:
        self.set_prediction(self.prediction, mode)

    @property
    def shown_mode(self) -> str:
        """What is drawn now: "measured" without a prediction, "separate" for predicted ranks
        that are not the traced ones (they get their own rows), else the overlay mode."""
        if self.prediction is None:
            return "measured"
        return "separate" if self.prediction.separate else self.overlay_mode

    @property
    def n_measured(self) -> int:
        return len(self.loaded.job.ranks) if self.loaded is not None else 0

    def _apply_layers(self) -> None:
        loaded = self.loaded
        if loaded is None:
            return
        pred = self.prediction
        mode = self.shown_mode
        if pred is not None and pred.separate:
            self._apply_separate(loaded, pred)
            return
        layers = [Layer("measured", loaded.job.ranks, loaded.tables)]
        labels: list[str] | None = None
        marks = measured_marks(loaded)
        if pred is not None:
            layers.append(Layer("predicted", pred.ranks, pred.tables, self._predicted_style(mode)))
            if not pred.same_ranks or mode == "predicted":
                # "rank 0 (= ranks 0, 8) · predicted"; with both layers the rows say which is which
                labels = [
                    (lab if mode == "predicted" else lab.replace(" · predicted", ""))
                    if ok
                    else f"rank {t.rank} · not in the predicted job"
                    for lab, ok, t in zip(pred.labels, pred.present, loaded.job.ranks)
                ]
            if mode == "predicted" or not self.show_measured_marks:
                marks = pred.iterations
        old = self.layout_model
        layout = LaneLayout(
            loaded.job.ranks,
            loaded.tables,
            labels,
            paired=mode == "paired",
            only_layer=PREDICTED if mode == "predicted" else None,
        )
        if old is not None and len(old.ranks) == len(layout.ranks):
            layout.collapsed_ranks = set(old.collapsed_ranks)
            layout.expanded_cpu = set(old.expanded_cpu)
            layout.rebuild()
        self._install(layers, layout, marks)

    def _apply_separate(self, loaded: LoadedJob, pred: PredictedOverlay) -> None:
        """Predicted ranks built anew (own events and lanes): their own rank groups first, then the
        measured ranks, collapsed, for reference (unless ``show_reference`` is off). Rank indices:
        the measured ranks keep 0..N-1, the predicted ones follow (N + k)."""
        n, m = len(loaded.job.ranks), len(pred.ranks)
        ranks = [*loaded.job.ranks, *pred.ranks]
        blank = empty_table()
        layers = [
            Layer("measured", ranks, [*loaded.tables, *([blank] * m)]),
            Layer("predicted", ranks, [*([blank] * n), *pred.tables]),
        ]
        labels = [f"measured rank {t.rank} · for reference" for t in loaded.job.ranks] + list(pred.labels)
        order = list(range(n, n + m)) + (list(range(n)) if self.show_reference else [])
        layout = LaneLayout(ranks, [*loaded.tables, *pred.tables], labels, order=order)
        old = self.layout_model
        if old is not None and len(old.ranks) == len(ranks) and old.order == order:
            layout.collapsed_ranks = set(old.collapsed_ranks)
            layout.expanded_cpu = set(old.expanded_cpu)
        else:
            layout.collapsed_ranks = set(range(n))  # the reference stays out of the way
        layout.rebuild()
        self._install(layers, layout, [*measured_marks(loaded), *pred.iterations])

    def _install(self, layers: list[Layer], layout: LaneLayout, marks: list[list[IterationMark]]) -> None:
        top, _ = self.y_range()
        x0, x1 = self.x_range()
        lo, hi = self.full_range()
        whole = x0 <= lo + 1e-9 and x1 >= hi - 1e-9  # showing everything: keep showing everything
        self.layout_model = layout
        self.label_axis.layout_model = layout
        self.item.set_data(layers, layout, marks)
        if self._match_masks:
            self.item.set_match_masks(self._match_masks)
        self._iteration_spans = _job_iterations(marks)
        self.overlay.set_extent(self.item.data_extent())
        self._update_scrollbar()
        self.scroll_to_row(top)
        if whole:
            lo, hi = self.full_range()
            self.zoom_to(lo, hi, pad=0.01)
        else:
            self.view_box.setXRange(x0, x1, padding=0)
        self._refresh_overlay()
        self.label_axis.update()

    def _predicted_style(self, mode: str) -> LayerStyle:
        if mode == "ghost":
            return LayerStyle(
                y0=0.1, height=0.8, outline=True, labels=False, color=GHOST_COLOR.get(self.theme.name)
            )
        return LayerStyle()

    def predicted_index(self, hit: Hit) -> int:
        """Index of a predicted hit's rank in the prediction's lists."""
        pred = self.prediction
        return hit.rank_index - self.n_measured if pred is not None and pred.separate else hit.rank_index

    def layer_rank(self, hit: Hit) -> RankTrace:
        """The RankTrace a hit's event belongs to (measured, or predicted)."""
        assert self.loaded is not None
        if hit.layer == PREDICTED and self.prediction is not None:
            return self.prediction.ranks[self.predicted_index(hit)]
        return self.loaded.job.ranks[hit.rank_index]

    def _families(self, hit: Hit) -> np.ndarray:
        assert self.loaded is not None
        if hit.layer == PREDICTED and self.prediction is not None:
            return self.prediction.families[self.predicted_index(hit)]
        return self.loaded.families[hit.rank_index]

    def _layer_table(self, layer: int, rank_index: int) -> RowTable | None:
        pred = self.prediction
        n = self.n_measured
        if layer == PREDICTED:
            if pred is None:
                return None
            k = rank_index - n if pred.separate else rank_index
            if not 0 <= k < len(pred.tables) or not pred.present[k]:
                return None
            return pred.tables[k]
        assert self.loaded is not None
        return self.loaded.tables[rank_index] if rank_index < n else None

    def _layers_at(self, row_layer: int | None) -> list[int]:
        """Layers to pick from in a row, the preferred first: in a ghost overlay the measured task
        wins where both are under the cursor (its details then include the prediction), so the
        ghost is picked where it differs from what was measured."""
        if row_layer is not None:
            return [row_layer]
        if self.prediction is not None and (self.prediction.separate or self.overlay_mode == "ghost"):
            return [MEASURED, PREDICTED]
        return [MEASURED]

    # ------------------------------------------------------------------ navigation
    def x_range(self) -> tuple[float, float]:
        (x0, x1), _ = self.view_box.viewRange()
        return float(x0), float(x1)

    def y_range(self) -> tuple[float, float]:
        _, (y0, y1) = self.view_box.viewRange()
        return float(min(y0, y1)), float(max(y0, y1))

    def visible_rows(self) -> float:
        return max(self.view_box.height(), 1.0) / ROW_PX

    def full_range(self) -> tuple[float, float]:
        ext = self.item.data_extent()
        return 0.0, max(ext.right(), 1e-3)

    def zoom_to(self, x0: float, x1: float, pad: float = 0.0) -> None:
        if x1 < x0:
            x0, x1 = x1, x0
        width = max(x1 - x0, _MIN_RANGE_MS)
        x0 -= width * pad
        x1 = x0 + width * (1 + 2 * pad)
        lo, hi = self.full_range()
        span = hi - lo
        width = min(x1 - x0, span * 1.05)
        x0 = min(max(x0, lo - span * 0.025), hi + span * 0.025 - width)
        self.view_box.setXRange(x0, x0 + width, padding=0)

    def zoom(self, factor: float, center: float | None = None) -> None:
        """Scale the visible time range by ``factor`` (<1 zooms in) keeping ``center`` in place."""
        x0, x1 = self.x_range()
        c = (x0 + x1) / 2 if center is None else center
        new_w = max((x1 - x0) * factor, _MIN_RANGE_MS)
        frac = (c - x0) / (x1 - x0) if x1 > x0 else 0.5
        self.zoom_to(c - frac * new_w, c - frac * new_w + new_w)

    def pan(self, fraction: float) -> None:
        x0, x1 = self.x_range()
        self.pan_by((x1 - x0) * fraction, 0.0)

    def pan_by(self, dx: float, drows: float) -> None:
        x0, x1 = self.x_range()
        if dx:
            self.zoom_to(x0 + dx, x1 + dx)
        if drows:
            self.scroll_rows(drows)

    def scroll_rows(self, delta: float) -> None:
        top, _ = self.y_range()
        self.scroll_to_row(top + delta)

    def scroll_to_row(self, top: float) -> None:
        n = len(self.layout_model.rows) if self.layout_model else 0
        visible = self.visible_rows()
        top = min(max(top, 0.0), max(n - visible + 0.5, 0.0))
        self.view_box.setYRange(top, top + visible, padding=0)

    def ensure_row_visible(self, row: int) -> None:
        top, bottom = self.y_range()
        if row < top or row + 1 > bottom:
            self.scroll_to_row(row - self.visible_rows() / 3)

    def reset_view(self) -> None:
        lo, hi = self.full_range()
        self.zoom_to(lo, hi, pad=0.01)
        self.scroll_to_row(0)

    def zoom_to_iteration(self, k: int) -> None:
        if not self._iteration_spans:
            return
        k = k % len(self._iteration_spans)
        self._iteration_cursor = k
        m = self._iteration_spans[k]
        self.zoom_to(m.start_ms, m.end_ms, pad=0.01)

    def step_iteration(self, delta: int) -> None:
        if self._iteration_spans:
            start = self._iteration_cursor if self._iteration_cursor >= 0 else (-1 if delta > 0 else 0)
            self.zoom_to_iteration(start + delta)

    def zoom_to_selection(self) -> None:
        if self.overlay.measure is not None:
            a, b = self.overlay.measure
            self.zoom_to(a, b, pad=0.02)
        elif self.selected is not None:
            s, e = self.event_span_ms(self.selected)
            self.zoom_to(s, max(e, s + 1e-3), pad=0.15)

    def clear_marks(self) -> None:
        self.overlay.measure = None
        self.select(None)

    def handle_key(self, ev: QKeyEvent) -> bool:
        key = ev.key()
        k = Qt.Key
        if key in (k.Key_W, k.Key_Plus, k.Key_Equal):
            self.zoom(_ZOOM_STEP, self._cursor_x())
        elif key in (k.Key_S, k.Key_Minus):
            self.zoom(1 / _ZOOM_STEP, self._cursor_x())
        elif key in (k.Key_A, k.Key_Left):
            self.pan(-_PAN_STEP)
        elif key in (k.Key_D, k.Key_Right):
            self.pan(_PAN_STEP)
        elif key == k.Key_Up:
            self.scroll_rows(-3)
        elif key == k.Key_Down:
            self.scroll_rows(3)
        elif key in (k.Key_PageUp, k.Key_PageDown):
            self.scroll_rows((1 if key == k.Key_PageDown else -1) * self.visible_rows() * 0.9)
        elif key == k.Key_F:
            self.zoom_to_selection()
        elif key in (k.Key_0, k.Key_Home, k.Key_R):
            self.reset_view()
        elif key == k.Key_BracketRight:
            self.step_iteration(1)
        elif key == k.Key_BracketLeft:
            self.step_iteration(-1)
        elif key == k.Key_N:
            self.step_match(1)
        elif key == k.Key_P:
            self.step_match(-1)
        elif key == k.Key_Escape:
            self.clear_marks()
        else:
            return False
        return True

    def _cursor_x(self) -> float | None:
        pos = self.canvas.mapFromGlobal(QCursor.pos())
        if not self.canvas.rect().contains(pos):
            return None
        scene_pos = self.canvas.mapToScene(pos)
        if not self.view_box.sceneBoundingRect().contains(scene_pos):
            return None
        return float(self.view_box.mapSceneToView(scene_pos).x())

    # ------------------------------------------------------------------ rows
    def toggle_row(self, row_index: int) -> None:
        lm = self.layout_model
        if lm is None or not 0 <= row_index < len(lm.rows):
            return
        row = lm.rows[row_index]
        if row.kind == RowKind.RANK:
            lm.toggle_rank(row.rank_index)
        elif row.kind == RowKind.CPU_GROUP or (row.kind == RowKind.CPU and row.depth == 0):
            lm.toggle_cpu(row.rank_index)
        else:
            return
        self.relayout()

    def relayout(self) -> None:
        self.item.layout_changed()
        self.overlay.set_extent(self.item.data_extent())
        self._update_scrollbar()
        top, _ = self.y_range()
        self.scroll_to_row(top)
        self._refresh_overlay()
        self.label_axis.update()

    def set_all_ranks_collapsed(self, collapsed: bool) -> None:
        if self.layout_model:
            self.layout_model.set_all_ranks_collapsed(collapsed)
            self.relayout()

    def set_all_cpu_expanded(self, expanded: bool) -> None:
        if self.layout_model:
            self.layout_model.set_all_cpu_expanded(expanded)
            self.relayout()

    # ------------------------------------------------------------------ picking and selection
    def pick(self, x: float, y: float, tolerance_px: float = 3.0) -> Hit | None:
        """The task drawn at data point (x ms, y rows), if any."""
        lm, loaded = self.layout_model, self.loaded
        if lm is None or loaded is None:
            return None
        row = lm.row_at(y)
        if row is None or not row.sources:
            return None
        x0, x1 = self.x_range()
        tol = tolerance_px * (x1 - x0) / max(self.view_box.width(), 1.0)
        best: tuple[float, int, int] | None = None  # distance, event, layer
        for layer in self._layers_at(row.layer):
            table = self._layer_table(layer, row.rank_index)
            if table is None:
                continue
            for src in row.sources:
                ti = table.row_of.get(src)
                if ti is None:
                    continue
                j = table.find(ti, x, tol)
                if j >= 0:
                    s, e = table.start[j], table.end[j]
                    d = 0.0 if s <= x <= e else min(abs(x - s), abs(x - e))
                    if best is None or d < best[0]:
                        best = (d, int(table.event[j]), layer)
        if best is None:
            return None
        return Hit(row.rank_index, best[1], best[2])

    def event_span_ms(self, hit: Hit) -> tuple[float, float]:
        t = self.layer_rank(hit)
        s = float(t.start[hit.event]) / 1e6
        return s, s + float(t.dur[hit.event]) / 1e6

    def row_of_event(self, hit: Hit) -> int:
        assert self.layout_model is not None
        t = self.layer_rank(hit)
        return self.layout_model.row_showing(
            hit.rank_index, int(t.lane[hit.event]), int(t.depth[hit.event]), hit.layer
        )

    def select(self, hit: Hit | None, reveal: bool = False) -> None:
        self.selected = hit
        if hit is not None and reveal:
            s, e = self.event_span_ms(hit)
            x0, x1 = self.x_range()
            if e - s > (x1 - x0) * 0.9:
                self.zoom_to(s, e, pad=0.1)
            elif s < x0 or e > x1:
                w = x1 - x0
                self.zoom_to((s + e) / 2 - w / 2, (s + e) / 2 + w / 2)
            self.ensure_row_visible(self.row_of_event(hit))
        self._refresh_overlay()
        self.selection_changed.emit(hit)

    def launch_of(self, hit: Hit) -> int:
        """The runtime call that launched a GPU activity (-1 if none or not a GPU activity)."""
        t = self.layer_rank(hit)
        if int(t.kind[hit.event]) in {int(k) for k in GPU_ACTIVITY_KINDS}:
            return int(t.launch[hit.event])
        return -1

    def _refresh_overlay(self) -> None:
        hit = self.selected
        self.overlay.selection = None
        self.overlay.arrow = None
        if hit is not None and self.loaded is not None and self.layout_model is not None:
            s, e = self.event_span_ms(hit)
            row = self.row_of_event(hit)
            self.overlay.selection = Marker(s, e, row)
            t = self.layer_rank(hit)
            launch = self.launch_of(hit)
            if launch >= 0:
                src = Hit(hit.rank_index, launch, hit.layer)
                ls, _ = self.event_span_ms(src)
                self.overlay.arrow = (QPointF(ls, self.row_of_event(src) + 0.5), QPointF(s, row + 0.5))
            elif int(t.kind[hit.event]) == Kind.RUNTIME:
                launched = np.flatnonzero(t.launch == hit.event)
                if len(launched):
                    dst = Hit(hit.rank_index, int(launched[0]), hit.layer)
                    ds, _ = self.event_span_ms(dst)
                    self.overlay.arrow = (QPointF(s, row + 0.5), QPointF(ds, self.row_of_event(dst) + 0.5))
        self.overlay.update()

    def describe(self, hit: Hit) -> str:
        """One-line hover text: name, duration, lane, rank."""
        assert self.loaded is not None
        t = self.layer_rank(hit)
        name = t.name_of(hit.event)
        if len(name) > 120:
            name = name[:117] + "…"
        dur = format_duration_ms(float(t.dur[hit.event]) / 1e6)
        lane = t.lanes[int(t.lane[hit.event])].label
        fam = Family(int(self._families(hit)[hit.event])).label
        start = float(t.start[hit.event]) / 1e6
        if hit.layer == PREDICTED and self.prediction is not None and self.prediction.separate:
            return f"predicted: {name}\n{dur} · {fam} · rank {t.rank} · {lane}\nstarts at {start:.6f} ms"
        if hit.layer == PREDICTED:
            m = self.loaded.job.ranks[hit.rank_index]
            was = format_duration_ms(float(m.dur[hit.event]) / 1e6)
            return (
                f"predicted: {name}\n{dur} (measured {was}) · {fam} · rank {t.rank} · {lane}\n"
                f"starts at {start:.6f} ms (measured {float(m.start[hit.event]) / 1e6:.6f} ms)"
            )
        return f"{name}\n{dur} · {fam} · rank {t.rank} · {lane}\nstarts at {start:.6f} ms"

    # ------------------------------------------------------------------ search
    def set_search(self, text: str) -> int:
        """Highlight tasks whose name contains ``text`` (case-insensitive); returns the count."""
        loaded = self.loaded
        self.match_index = -1
        if loaded is None or not text.strip():
            self.matches = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            self._match_masks = []
            self.item.set_match_masks([None] * (len(loaded.tables) if loaded else 0))
            return 0
        needle = text.strip().lower()
        masks: list[np.ndarray | None] = []
        ranks_l, events_l, starts_l = [], [], []
        for ri, (t, table) in enumerate(zip(loaded.job.ranks, loaded.tables)):
            name_hit = np.fromiter((needle in s.lower() for s in t.strings), bool, len(t.strings))
            if not name_hit.any():
                masks.append(None)
                continue
            tmask = name_hit[t.name[table.event]]
            masks.append(tmask)
            ev = table.event[tmask].astype(np.int64)
            ranks_l.append(np.full(len(ev), ri, np.int64))
            events_l.append(ev)
            starts_l.append(t.start[ev])
        self._match_masks = masks
        self.item.set_match_masks(masks)
        if not events_l:
            self.matches = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            return 0
        ranks = np.concatenate(ranks_l)
        events = np.concatenate(events_l)
        order = np.lexsort((ranks, np.concatenate(starts_l)))
        self.matches = (ranks[order], events[order])
        return len(events)

    @property
    def match_count(self) -> int:
        return len(self.matches[0])

    def step_match(self, delta: int) -> Hit | None:
        n = self.match_count
        if n == 0:
            return None
        self.match_index = (
            (self.match_index + delta) % n if self.match_index >= 0 else (0 if delta > 0 else n - 1)
        )
        hit = Hit(int(self.matches[0][self.match_index]), int(self.matches[1][self.match_index]))
        self.select(hit, reveal=True)
        return hit

    # ------------------------------------------------------------------ theme
    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.canvas.setBackground(QColor(theme.background))
        self.item.set_theme(theme)
        if self.prediction is not None and len(self.item.layers) > 1:
            self.item.layers[PREDICTED].style = self._predicted_style(self.shown_mode)
        self.overlay.theme = theme
        self.label_axis.theme = theme
        for ax in (self.time_axis,):
            ax.setPen(pg.mkPen(theme.muted))
            ax.setTextPen(pg.mkPen(theme.foreground))
        self.label_axis.update()
        self.overlay.update()

    # ------------------------------------------------------------------ internals
    def _keep_row_height(self) -> None:
        top, _ = self.y_range()
        self.scroll_to_row(top)
        self._update_scrollbar()

    def _update_scrollbar(self) -> None:
        n = len(self.layout_model.rows) if self.layout_model else 0
        visible = self.visible_rows()
        self._syncing_scrollbar = True
        self.scrollbar.setRange(0, max(0, math.ceil(n - visible + 0.5)))
        self.scrollbar.setPageStep(max(1, int(visible)))
        self.scrollbar.setValue(int(round(self.y_range()[0])))
        self._syncing_scrollbar = False

    def _on_scrollbar(self, value: int) -> None:
        if not self._syncing_scrollbar:
            self.scroll_to_row(float(value))

    def _on_range_changed(self, *_: object) -> None:
        self._syncing_scrollbar = True
        self.scrollbar.setValue(int(round(self.y_range()[0])))
        self._syncing_scrollbar = False
        self.label_axis.update()
        self.view_changed.emit()

    def _on_measure(self, a: float, b: float, finished: bool) -> None:
        self.overlay.measure = (min(a, b), max(a, b))
        self.overlay.update()
        self.measured.emit(min(a, b), max(a, b))

    def _on_mouse_moved(self, pos: QPointF) -> None:
        if self.loaded is None or not self.view_box.sceneBoundingRect().contains(pos):
            return
        p = self.view_box.mapSceneToView(pos)
        hit = self.pick(p.x(), p.y())
        if hit == self.hover_hit:
            return
        self.hover_hit = hit
        text = self.describe(hit) if hit is not None else ""
        self.hovered.emit(text.replace("\n", "  ·  "))
        if text:
            QToolTip.showText(QCursor.pos(), text, self.canvas)
        else:
            QToolTip.hideText()

    def _on_mouse_clicked(self, ev) -> None:  # type: ignore[no-untyped-def]
        if ev.button() != Qt.MouseButton.LeftButton or self.loaded is None:
            return
        pos = ev.scenePos()
        if not self.view_box.sceneBoundingRect().contains(pos):
            return
        p = self.view_box.mapSceneToView(pos)
        hit = self.pick(p.x(), p.y())
        self.select(hit)
        if hit is not None and ev.double():
            self.zoom_to_selection()

    def _on_painted(self, seconds: float) -> None:
        if self._awaiting_first_paint:
            self._awaiting_first_paint = False
            self.first_paint.emit(seconds)


def _job_iterations(marks: list[list[IterationMark]]) -> list[IterationMark]:
    """Iterations across ranks: same name, earliest start to latest end."""
    spans: dict[str, list[float]] = {}
    for per_rank in marks:
        for m in per_rank:
            s = spans.setdefault(m.name, [m.start_ms, m.end_ms])
            s[0] = min(s[0], m.start_ms)
            s[1] = max(s[1], m.end_ms)
    out = [IterationMark(n, a, b) for n, (a, b) in spans.items()]
    out.sort(key=lambda m: m.start_ms)
    return out
