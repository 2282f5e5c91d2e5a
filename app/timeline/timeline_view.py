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

:class:`TimelineView` is assembled from one part per job, each in its own module: navigation
(:mod:`app.timeline.navigation`), picking and selection (:mod:`app.timeline.selection`), search
(:mod:`app.timeline.search`) and the predicted layer (:mod:`app.timeline.prediction_layers`); the
pyqtgraph pieces are in :mod:`app.timeline.canvas`. This module builds the widget, loads a job and
handles rows (collapse, expand) and the theme.
"""

from __future__ import annotations

import time

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QHBoxLayout, QScrollBar, QVBoxLayout, QWidget

from app.loaded_job import LoadedJob
from app.theme import LIGHT, Theme
from app.timeline.canvas import (
    LABEL_WIDTH,
    PREDICTED_LABEL_COLOR,
    LaneLabelAxis,
    TimelineCanvas,
    TimelineViewBox,
)
from app.timeline.hit import MEASURED, PREDICTED, Hit
from app.timeline.lane_layout import LaneLayout, RowKind
from app.timeline.layer import Layer
from app.timeline.memory_lane import MemoryLaneItem, curve_for
from app.timeline.navigation import ROW_PX, TimelineNavigation
from app.timeline.overlay_data import measured_marks
from app.timeline.overview import OverviewStrip
from app.timeline.prediction_layers import GHOST_COLOR, OVERLAY_MODES, PredictionLayers
from app.timeline.rank_grouping import GroupingBar, RankGrouping, default_grouping
from app.timeline.row_table_loader import RowTableLoader
from app.timeline.search import TimelineSearch
from app.timeline.selection import TimelineSelection
from app.timeline.span_item import OverlayItem, TimelineItem
from app.timeline.stall_item import StallItem, stalls_of

__all__ = [
    "GHOST_COLOR",
    "LABEL_WIDTH",
    "MEASURED",
    "OVERLAY_MODES",
    "PREDICTED",
    "PREDICTED_LABEL_COLOR",
    "ROW_PX",
    "Hit",
    "TimelineView",
]


class TimelineView(
    TimelineNavigation, TimelineSelection, TimelineSearch, PredictionLayers, RankGrouping, QWidget
):
    """Rows of all ranks, navigation, hover, selection and search (see the module docstring)."""

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
        self._awaiting_first_paint = False

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
        self.memory_item = MemoryLaneItem(theme)
        self.view_box.addItem(self.item, ignoreBounds=True)
        self.view_box.addItem(self.memory_item, ignoreBounds=True)
        self.memory_item.setZValue(5)
        self.stall_item = StallItem(theme)
        self.view_box.addItem(self.stall_item, ignoreBounds=True)
        self.stall_item.setZValue(6)
        self.view_box.addItem(self.overlay, ignoreBounds=True)
        self.overlay.setZValue(10)
        self.scrollbar = QScrollBar(Qt.Orientation.Vertical)
        self.scrollbar.setSingleStep(1)
        # the job overview above the lanes, lined up with the plot area (see app.timeline.overview)
        self.overview = OverviewStrip(theme)
        self.grouping_bar = GroupingBar()
        self.grouping_bar.setVisible(False)
        lanes = QHBoxLayout()
        lanes.setContentsMargins(0, 0, 0, 0)
        lanes.setSpacing(0)
        lanes.addWidget(self.canvas, 1)
        lanes.addWidget(self.scrollbar)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.grouping_bar)
        lay.addWidget(self.overview)
        lay.addLayout(lanes, 1)

        self.wire_navigation()
        self.view_box.sigRangeChanged.connect(self._on_range_changed)
        self.wire_pointer()
        self.label_axis.sigRowClicked.connect(self.toggle_row)
        self.item.sigPainted.connect(self._on_painted)
        # lanes whose row tables are not built yet are built on a worker, then repainted
        self.row_loader = RowTableLoader(self)
        self._missing: list[tuple[int, int]] = []
        self._ask_timer = QTimer(self)
        self._ask_timer.setSingleShot(True)
        self._ask_timer.setInterval(0)  # after the paint that found them, never inside it
        self._ask_timer.timeout.connect(self._ask_for_tables)
        self.item.sigTablesMissing.connect(self._on_tables_missing)
        self.row_loader.built.connect(self._on_tables_built)
        self.view_box.sigResized.connect(self._follow_overview)
        self.overview.rank_clicked.connect(self.jump_to_rank)
        self.wire_grouping()
        self.apply_theme(theme)

    # ------------------------------------------------------------------ data
    def set_job(self, loaded: LoadedJob | None) -> None:
        self.row_loader.forget()
        self._missing = []
        self.loaded = loaded
        self.prediction = None
        self.selected = None
        self.hover_hit = None
        self.clear_search()
        self.overlay.selection = None
        self.overlay.arrow = None
        self.overlay.measure = None
        self.grouping_bar.setVisible(loaded is not None and len(loaded.job.ranks) > 1)
        self.groups, self.grouping = [], ""
        self.group_order, self.group_labels, self.group_collapsed = None, None, set()
        if loaded is None:
            self.overview.set_job([], [])
        else:
            self.overview.set_job(loaded.job.ranks, loaded.tables, loaded.activity)
        if loaded is not None and loaded.stragglers is not None:
            self.overview.set_flagged({r.rank_index: r.why for r in loaded.stragglers.flagged})
        if loaded is None:
            self.layout_model = None
            self.label_axis.layout_model = None
            self.item.layers = []
            self.item.invalidate()
            self.memory_item.set_data(None, [], self.item.data_extent())
            self.stall_item.set_data(None, [], self.item.data_extent())
            self.overlay.update()
            return
        ranks = loaded.job.ranks
        self.layout_model = LaneLayout(ranks, loaded.tables)
        self.label_axis.layout_model = self.layout_model
        marks = measured_marks(loaded)
        self.item.set_data([Layer("measured", ranks, loaded.tables)], self.layout_model, marks)
        self.overlay.set_extent(self.item.data_extent())
        memory = loaded.memory or [[] for _ in ranks]
        self.memory_item.set_data(
            self.layout_model, [curve_for(r, m) for r, m in zip(ranks, memory)], self.item.data_extent()
        )
        self.stall_item.set_data(self.layout_model, stalls_of(loaded), self.item.data_extent())
        self.set_iterations(marks, reset_cursor=True)
        self._awaiting_first_paint = True
        self.sync_scrollbar()
        self.reset_view()
        self.set_grouping(default_grouping(loaded))
        self.selection_changed.emit(None)

    def set_summaries(self, loaded: LoadedJob) -> None:
        """What arrives with the job's summaries, after its lanes: the unexplained GPU delays."""
        if loaded is not self.loaded or self.layout_model is None:
            return
        self.stall_item.set_data(self.layout_model, stalls_of(loaded), self.item.data_extent())

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Stop and wait for the worker that builds row tables (before the view goes away)."""
        self._ask_timer.stop()
        self.row_loader.shutdown(timeout_ms)
        self.overview.shutdown(timeout_ms)

    # ------------------------------------------------------------------ row tables
    @property
    def tables_pending(self) -> bool:
        """Row tables were asked for and are not all built yet."""
        return self._ask_timer.isActive() or self.row_loader.busy

    def wait_drawn(self, timeout_s: float = 30.0) -> bool:
        """Process events until every row in view is drawn with its table and the overview is
        binned (for offscreen grabs: screenshots, tests); False if that took over ``timeout_s``."""
        end = time.monotonic() + timeout_s
        self.canvas.grab()  # a paint reports the tables it lacks
        while time.monotonic() < end:
            QApplication.processEvents()
            if self.tables_pending or self.overview.binning:
                time.sleep(0.005)
                continue
            self.canvas.grab()
            if not self.item.last_missing and not self.tables_pending:
                return True
        return False

    def _on_tables_missing(self, missing: list[tuple[int, int]]) -> None:
        self._missing = missing
        self._ask_timer.start()

    def _ask_for_tables(self) -> None:
        self.row_loader.request([layer.tables for layer in self.item.layers], self._missing)

    def _on_tables_built(self) -> None:
        self.fill_match_masks()  # the search highlights the newly built lanes too
        self.item.invalidate()

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
        self.memory_item.set_extent(self.item.data_extent())
        self.stall_item.set_extent(self.item.data_extent())
        self.sync_scrollbar()
        top, _ = self.y_range()
        self.scroll_to_row(top)
        self.refresh_overlay()
        self.label_axis.update()

    def set_prediction(self, prediction: object, mode: str | None = None) -> None:  # type: ignore[override]
        """As :meth:`PredictionLayers.set_prediction`; the grouping bar works unless the predicted
        ranks have rows of their own."""
        super().set_prediction(prediction, mode)  # type: ignore[arg-type]
        self.grouping_bar.setEnabled(self.shown_mode != "separate")

    def jump_to_rank(self, rank_index: int) -> None:
        """Scroll the lanes so that the rank's header row is the top row."""
        self.reveal_rank(rank_index)
        lm = self.layout_model
        if lm is None or not 0 <= rank_index < len(lm.group_bounds):
            return
        first, end = lm.group_bounds[rank_index]
        if end > first:  # a rank left out of the display order has no rows
            self.scroll_to_row(float(first))

    def ranks_in_view(self) -> tuple[int, int]:
        """Smallest and largest rank index with a row in view ((0, -1) when none)."""
        lm = self.layout_model
        if lm is None or not lm.rows:
            return 0, -1
        top, bottom = self.y_range()
        r0 = min(max(int(top), 0), len(lm.rows) - 1)
        r1 = min(max(int(bottom), 0), len(lm.rows) - 1)
        shown = {lm.rows[r].rank_index for r in range(r0, r1 + 1)}
        return min(shown), max(shown)

    def _follow_overview(self, *_: object) -> None:
        """The overview follows the x range and the plot area, and outlines the ranks in view."""
        if not self.overview.ranks or self.overview.isHidden():
            return
        area = self.canvas.mapFromScene(self.view_box.sceneBoundingRect()).boundingRect()
        x0, x1 = self.x_range()
        self.overview.in_view = self.ranks_in_view()
        self.overview.follow(x0, x1, float(area.left()), float(area.width()))

    def set_all_ranks_collapsed(self, collapsed: bool) -> None:
        if self.layout_model:
            self.layout_model.set_all_ranks_collapsed(collapsed)
            self.relayout()

    def set_all_cpu_expanded(self, expanded: bool) -> None:
        if self.layout_model:
            self.layout_model.set_all_cpu_expanded(expanded)
            self.relayout()

    # ------------------------------------------------------------------ theme
    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.canvas.setBackground(QColor(theme.background))
        self.item.set_theme(theme)
        if self.prediction is not None and len(self.item.layers) > 1:
            self.item.layers[PREDICTED].style = self.predicted_style(self.shown_mode)
        self.overlay.theme = theme
        self.memory_item.theme = theme
        self.label_axis.theme = theme
        self.overview.apply_theme(theme)
        for ax in (self.time_axis,):
            ax.setPen(pg.mkPen(theme.muted))
            ax.setTextPen(pg.mkPen(theme.foreground))
        self.label_axis.update()
        self.overlay.update()

    # ------------------------------------------------------------------ view news
    def _on_range_changed(self, *_: object) -> None:
        self._follow_overview()
        self.view_changed.emit()

    def _on_painted(self, seconds: float) -> None:
        if self._awaiting_first_paint:
            self._awaiting_first_paint = False
            self.first_paint.emit(seconds)
