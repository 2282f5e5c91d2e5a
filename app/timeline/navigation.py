"""Moving around the timeline: the visible time range and rows, zoom, pan, the scroll bar kept in
step with the view, iteration stepping and the navigation keys.

:class:`TimelineNavigation` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`;
it works on the plot's ``view_box``, the span ``item`` (for the data extent), the ``scrollbar`` and
the shared state's ``layout_model``. Keys that act on the selection or the search (F, N, P, Esc)
are the view's to route. Rows have a fixed height in pixels: the y range follows the widget's height, so
resizing shows more rows instead of stretching them.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QCursor, QKeyEvent
from PySide6.QtWidgets import QScrollBar

from app.timeline.canvas import ZOOM_STEP, LaneLabelAxis, TimelineCanvas, TimelineViewBox
from app.timeline.span_item import TimelineItem
from app.timeline.state import TimelineState
from app.view_model.layer import IterationMark

ROW_PX = 20
PAN_STEP = 0.15
MIN_RANGE_MS = 1e-5  # 10 ns


def job_iterations(marks: list[list[IterationMark]]) -> list[IterationMark]:
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


class TimelineNavigation(QObject):
    """Time range, rows, keys and iterations of the timeline view (see the module docstring)."""

    def __init__(
        self,
        state: TimelineState,
        view_box: TimelineViewBox,
        canvas: TimelineCanvas,
        label_axis: LaneLabelAxis,
        scrollbar: QScrollBar,
        item: TimelineItem,
    ) -> None:
        super().__init__(canvas)
        self.state = state
        self.view_box = view_box
        self.canvas = canvas
        self.label_axis = label_axis
        self.scrollbar = scrollbar
        self.item = item
        self.iteration_spans: list[IterationMark] = []  # replaced, never changed in place
        self._iteration_cursor = -1
        self._syncing_scrollbar = False
        # keep the row height when the view resizes; the scroll bar and the view follow each other
        self.view_box.sigResized.connect(self._keep_row_height)
        self.view_box.sigRangeChanged.connect(self._follow_range)
        self.scrollbar.valueChanged.connect(self._on_scrollbar)

    # ------------------------------------------------------------------ ranges
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

    # ------------------------------------------------------------------ time axis
    def zoom_to(self, x0: float, x1: float, pad: float = 0.0) -> None:
        if x1 < x0:
            x0, x1 = x1, x0
        width = max(x1 - x0, MIN_RANGE_MS)
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
        new_w = max((x1 - x0) * factor, MIN_RANGE_MS)
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

    def reset_view(self) -> None:
        lo, hi = self.full_range()
        self.zoom_to(lo, hi, pad=0.01)
        self.scroll_to_row(0)

    # ------------------------------------------------------------------ rows
    def scroll_rows(self, delta: float) -> None:
        top, _ = self.y_range()
        self.scroll_to_row(top + delta)

    def scroll_to_row(self, top: float) -> None:
        n = len(self.state.layout_model.rows) if self.state.layout_model else 0
        visible = self.visible_rows()
        top = min(max(top, 0.0), max(n - visible + 0.5, 0.0))
        self.view_box.setYRange(top, top + visible, padding=0)

    def ensure_row_visible(self, row: int) -> None:
        top, bottom = self.y_range()
        if row < top or row + 1 > bottom:
            self.scroll_to_row(row - self.visible_rows() / 3)

    def sync_scrollbar(self) -> None:
        """Fit the scroll bar to the number of rows and the rows in view."""
        n = len(self.state.layout_model.rows) if self.state.layout_model else 0
        visible = self.visible_rows()
        self._syncing_scrollbar = True
        self.scrollbar.setRange(0, max(0, math.ceil(n - visible + 0.5)))
        self.scrollbar.setPageStep(max(1, int(visible)))
        self.scrollbar.setValue(int(round(self.y_range()[0])))
        self._syncing_scrollbar = False

    def _keep_row_height(self) -> None:
        top, _ = self.y_range()
        self.scroll_to_row(top)
        self.sync_scrollbar()

    def _on_scrollbar(self, value: int) -> None:
        if not self._syncing_scrollbar:
            self.scroll_to_row(float(value))

    def _follow_range(self, *_: object) -> None:
        """The view moved: the scroll bar and the labels follow it."""
        self._syncing_scrollbar = True
        self.scrollbar.setValue(int(round(self.y_range()[0])))
        self._syncing_scrollbar = False
        self.label_axis.update()

    # ------------------------------------------------------------------ iterations and marks
    def set_iterations(self, marks: list[list[IterationMark]], reset_cursor: bool) -> None:
        """The iterations ``[`` and ``]`` step through (from every rank's iteration marks)."""
        self.iteration_spans = job_iterations(marks)
        if reset_cursor:
            self._iteration_cursor = -1

    @property
    def iteration_names(self) -> list[str]:
        return [m.name for m in self.iteration_spans]

    def zoom_to_iteration(self, k: int) -> None:
        if not self.iteration_spans:
            return
        k = k % len(self.iteration_spans)
        self._iteration_cursor = k
        m = self.iteration_spans[k]
        self.zoom_to(m.start_ms, m.end_ms, pad=0.01)

    def step_iteration(self, delta: int) -> None:
        if self.iteration_spans:
            start = self._iteration_cursor if self._iteration_cursor >= 0 else (-1 if delta > 0 else 0)
            self.zoom_to_iteration(start + delta)

    # ------------------------------------------------------------------ keys
    def handle_key(self, ev: QKeyEvent) -> bool:
        """Act on a navigation key; False if ``ev`` is not one."""
        key = ev.key()
        k = Qt.Key
        if key in (k.Key_W, k.Key_Plus, k.Key_Equal):
            self.zoom(ZOOM_STEP, self.cursor_x())
        elif key in (k.Key_S, k.Key_Minus):
            self.zoom(1 / ZOOM_STEP, self.cursor_x())
        elif key in (k.Key_A, k.Key_Left):
            self.pan(-PAN_STEP)
        elif key in (k.Key_D, k.Key_Right):
            self.pan(PAN_STEP)
        elif key == k.Key_Up:
            self.scroll_rows(-3)
        elif key == k.Key_Down:
            self.scroll_rows(3)
        elif key in (k.Key_PageUp, k.Key_PageDown):
            self.scroll_rows((1 if key == k.Key_PageDown else -1) * self.visible_rows() * 0.9)
        elif key in (k.Key_0, k.Key_Home, k.Key_R):
            self.reset_view()
        elif key == k.Key_BracketRight:
            self.step_iteration(1)
        elif key == k.Key_BracketLeft:
            self.step_iteration(-1)
        else:
            return False
        return True

    def cursor_x(self) -> float | None:
        pos = self.canvas.mapFromGlobal(QCursor.pos())
        if not self.canvas.rect().contains(pos):
            return None
        scene_pos = self.canvas.mapToScene(pos)
        if not self.view_box.sceneBoundingRect().contains(scene_pos):
            return None
        return float(self.view_box.mapSceneToView(scene_pos).x())
