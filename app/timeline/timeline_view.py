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

:class:`TimelineView` owns one part per job, each in its own module, and wires their signals:
navigation (:mod:`app.timeline.navigation`), picking and selection (:mod:`app.timeline.selection`),
search (:mod:`app.timeline.search`), the rank grouping (:mod:`app.timeline.rank_grouping`), the
predicted layer (:mod:`app.timeline.prediction_layers`), the rows (:mod:`app.timeline.lane_rows`)
and the row tables built on demand (:mod:`app.timeline.table_feed`). The parts share one plain
:class:`~app.timeline.state.TimelineState` and never reach into each other; the view's public names
forward to the part that owns them. The pyqtgraph pieces are in :mod:`app.timeline.canvas`. This
module builds the widget, loads a job and applies the theme.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QScrollBar, QVBoxLayout, QWidget

from app.theme import LIGHT, Theme
from app.timeline.canvas import (
    LABEL_WIDTH,
    PREDICTED_LABEL_COLOR,
    LaneLabelAxis,
    TimelineCanvas,
    TimelineViewBox,
)
from app.timeline.hit import MEASURED, PREDICTED, Hit
from app.timeline.lane_layout import LaneLayout
from app.timeline.lane_rows import LaneRows
from app.timeline.memory_lane import MemoryLaneItem, curve_for
from app.timeline.navigation import ROW_PX, TimelineNavigation
from app.timeline.overview import OverviewStrip
from app.timeline.prediction_layers import GHOST_COLOR, OVERLAY_MODES, PredictionLayers
from app.timeline.rank_grouping import GroupingBar, RankGrouping, default_grouping
from app.timeline.search import TimelineSearch
from app.timeline.selection import TimelineSelection
from app.timeline.span_item import OverlayItem, TimelineItem
from app.timeline.stall_item import StallItem, stalls_of
from app.timeline.state import Forward, TimelineState
from app.timeline.table_feed import TableFeed
from app.view_model.layer import Layer
from app.view_model.loaded_job import LoadedJob
from app.view_model.overlay_data import measured_marks

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


class TimelineView(QWidget):
    """Rows of all ranks, navigation, hover, selection and search (see the module docstring)."""

    selection_changed = Signal(object)  # Hit or None
    hovered = Signal(str)
    measured = Signal(float, float)
    view_changed = Signal()
    first_paint = Signal(float)  # seconds the first paint of a new job took

    # the public face: each name is the owning part's (read and written there)
    loaded = Forward("state")
    layout_model = Forward("state")
    prediction = Forward("state")
    overlay_mode = Forward("state")
    shown_mode = Forward("state")
    n_measured = Forward("state")
    x_range = Forward("nav")
    y_range = Forward("nav")
    visible_rows = Forward("nav")
    full_range = Forward("nav")
    zoom_to = Forward("nav")
    zoom = Forward("nav")
    pan = Forward("nav")
    pan_by = Forward("nav")
    reset_view = Forward("nav")
    scroll_rows = Forward("nav")
    scroll_to_row = Forward("nav")
    ensure_row_visible = Forward("nav")
    sync_scrollbar = Forward("nav")
    iteration_names = Forward("nav")
    zoom_to_iteration = Forward("nav")
    step_iteration = Forward("nav")
    selected = Forward("selection")
    select = Forward("selection")
    pick = Forward("selection")
    describe = Forward("selection")
    describe_stall = Forward("selection")
    event_span_ms = Forward("selection")
    row_of_event = Forward("selection")
    layer_rank = Forward("selection")
    predicted_index = Forward("selection")
    refresh_overlay = Forward("selection")
    zoom_to_selection = Forward("selection")
    clear_marks = Forward("selection")
    set_search = Forward("search")
    step_match = Forward("search")
    matches = Forward("search")
    match_index = Forward("search")
    match_count = Forward("search")
    match_masks = Forward("search")
    set_prediction = Forward("layers")
    set_overlay_mode = Forward("layers")
    predicted_style = Forward("layers")
    show_reference = Forward("layers")
    show_measured_marks = Forward("layers")
    set_grouping = Forward("rank_grouping")
    grouping = Forward("rank_grouping")
    groups = Forward("rank_grouping")
    group_of = Forward("rank_grouping")
    grouping_bar = Forward("rank_grouping")
    toggle_row = Forward("rows")
    relayout = Forward("rows")
    jump_to_rank = Forward("rows")
    ranks_in_view = Forward("rows")
    set_all_ranks_collapsed = Forward("rows")
    set_all_cpu_expanded = Forward("rows")
    tables_pending = Forward("feed")
    wait_drawn = Forward("feed")
    row_loader = Forward("feed")

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.state = TimelineState(theme)
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
        self.stall_item = StallItem(theme)
        for z, it in ((None, self.item), (5, self.memory_item), (6, self.stall_item), (10, self.overlay)):
            self.view_box.addItem(it, ignoreBounds=True)
            if z is not None:
                it.setZValue(z)
        self.scrollbar = QScrollBar(Qt.Orientation.Vertical)
        self.scrollbar.setSingleStep(1)
        # the job overview above the lanes, lined up with the plot area (see app.timeline.overview)
        self.overview = OverviewStrip(theme)
        bar = GroupingBar()
        bar.setVisible(False)
        lanes = QHBoxLayout()
        lanes.setContentsMargins(0, 0, 0, 0)
        lanes.setSpacing(0)
        lanes.addWidget(self.canvas, 1)
        lanes.addWidget(self.scrollbar)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(bar)
        lay.addWidget(self.overview)
        lay.addLayout(lanes, 1)

        # the parts, each given what it works on
        st = self.state
        self.nav = TimelineNavigation(
            st, self.view_box, self.canvas, self.label_axis, self.scrollbar, self.item
        )
        sel = TimelineSelection(st, self.nav, self.view_box, self.canvas, self.overlay, self.stall_item)
        self.selection = sel
        self.search = TimelineSearch(st, self.item, self)
        self.rank_grouping = RankGrouping(st, bar)
        items = (self.item, self.overlay, self.memory_item, self.stall_item)
        self.layers = PredictionLayers(st, self.nav, self.rank_grouping, self.label_axis, *items)
        self.rows = LaneRows(
            st, self.nav, self.rank_grouping, self.canvas, self.label_axis, self.overview, items
        )
        self.feed = TableFeed(self.item, self.canvas, self.overview)

        # how they talk: signals, wired here only
        sel.selection_changed.connect(self.selection_changed)
        sel.hovered.connect(self.hovered)
        sel.measured.connect(self.measured)
        self.search.stepped.connect(lambda hit: sel.select(hit, reveal=True))
        self.layers.replacing.connect(sel.forget_predicted)
        self.layers.installed.connect(self.search.reapply)
        self.layers.installed.connect(sel.refresh_overlay)
        # the grouping bar works unless the predicted ranks have rows of their own
        self.layers.replacing.connect(lambda: bar.setEnabled(st.shown_mode != "separate"))
        self.rank_grouping.regrouped.connect(self._regroup)
        self.rows.relaid.connect(sel.refresh_overlay)
        self.feed.built.connect(self.search.fill_match_masks)  # the search highlights new lanes too
        self.feed.built.connect(self.item.invalidate)
        self.view_box.sigRangeChanged.connect(self._on_range_changed)
        self.item.sigPainted.connect(self._on_painted)
        self.apply_theme(theme)

    # ------------------------------------------------------------------ data
    def set_job(self, loaded: LoadedJob | None) -> None:
        self.feed.forget()
        st = self.state
        st.loaded, st.prediction = loaded, None
        self.selection.reset()
        self.search.clear_search()
        self.rank_grouping.grouping_bar.setVisible(loaded is not None and len(loaded.job.ranks) > 1)
        self.rank_grouping.reset()
        if loaded is None:
            self.overview.set_job([], [])
        else:
            self.overview.set_job(loaded.job.ranks, loaded.tables, loaded.activity)
        if loaded is not None and loaded.stragglers is not None:
            self.overview.set_flagged({r.rank_index: r.why for r in loaded.stragglers.flagged})
        if loaded is None:
            st.layout_model = None
            self.label_axis.layout_model = None
            self.item.layers = []
            self.item.invalidate()
            self.memory_item.set_data(None, [], self.item.data_extent())
            self.stall_item.set_data(None, [], self.item.data_extent())
            self.overlay.update()
            return
        ranks = loaded.job.ranks
        layout = st.layout_model = LaneLayout(ranks, loaded.tables)
        self.label_axis.layout_model = layout
        marks = measured_marks(loaded)
        self.item.set_data([Layer("measured", ranks, loaded.tables)], layout, marks)
        extent = self.item.data_extent()
        self.overlay.set_extent(extent)
        memory = loaded.memory or [[] for _ in ranks]
        self.memory_item.set_data(layout, [curve_for(r, m) for r, m in zip(ranks, memory)], extent)
        self.stall_item.set_data(layout, stalls_of(loaded), extent)
        self.nav.set_iterations(marks, reset_cursor=True)
        self._awaiting_first_paint = True
        self.nav.sync_scrollbar()
        self.nav.reset_view()
        self.rank_grouping.set_grouping(default_grouping(loaded))
        self.selection_changed.emit(None)

    def set_summaries(self, loaded: LoadedJob) -> None:
        """What arrives with the job's summaries, after its lanes: the unexplained GPU delays."""
        if loaded is not self.state.loaded or self.state.layout_model is None:
            return
        self.stall_item.set_data(self.state.layout_model, stalls_of(loaded), self.item.data_extent())

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Stop and wait for the workers that build row tables and bin the overview (before the
        view goes away)."""
        self.feed.shutdown(timeout_ms)
        self.overview.shutdown(timeout_ms)

    def handle_key(self, ev: QKeyEvent) -> bool:
        """Keys: navigation's, then F zoom to the selection, N/P step matches, Esc clears."""
        if self.nav.handle_key(ev):
            return True
        k = Qt.Key
        action = {
            k.Key_F: self.selection.zoom_to_selection,
            k.Key_N: lambda: self.search.step_match(1),
            k.Key_P: lambda: self.search.step_match(-1),
            k.Key_Escape: self.selection.clear_marks,
        }.get(Qt.Key(ev.key()))
        if action is None:
            return False
        action()
        return True

    def _regroup(self, scroll: bool) -> None:
        self.layers.apply_layers(regrouped=True)
        if scroll:
            self.nav.scroll_to_row(0)

    # ------------------------------------------------------------------ theme
    def apply_theme(self, theme: Theme) -> None:
        self.theme = self.state.theme = theme
        self.canvas.setBackground(QColor(theme.background))
        self.item.set_theme(theme)
        if self.state.prediction is not None and len(self.item.layers) > 1:
            self.item.layers[PREDICTED].style = self.layers.predicted_style(self.state.shown_mode)
        self.overlay.theme = theme
        self.memory_item.theme = theme
        self.label_axis.theme = theme
        self.overview.apply_theme(theme)
        self.time_axis.setPen(pg.mkPen(theme.muted))
        self.time_axis.setTextPen(pg.mkPen(theme.foreground))
        self.label_axis.update()
        self.overlay.update()

    # ------------------------------------------------------------------ view news
    def _on_range_changed(self, *_: object) -> None:
        self.rows.follow_overview()
        self.view_changed.emit()

    def _on_painted(self, seconds: float) -> None:
        if self._awaiting_first_paint:
            self._awaiting_first_paint = False
            self.first_paint.emit(seconds)
