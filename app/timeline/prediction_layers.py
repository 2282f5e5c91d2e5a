"""The predicted layer of the timeline: the ranks of a replay or an estimate drawn with the
measured ones, in one of :data:`OVERLAY_MODES` (an outline of the predicted tasks that differ visibly
from the measured ones, a ghost outline of every predicted task, a predicted row under every
measured row, or the predicted ranks alone), or in rows of their own when the estimator rebuilt the
ranks.

:class:`PredictionLayers` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`:
it builds the layers and the row layout for what is shown (in the rank grouping's order) and
installs them, keeping the visible time range, rows and collapsed groups; its signals tell the other
parts before (:attr:`~PredictionLayers.replacing`) and after (:attr:`~PredictionLayers.installed`).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.timeline.canvas import LaneLabelAxis
from app.timeline.hit import PREDICTED
from app.timeline.lane_layout import LaneLayout
from app.timeline.memory_lane import MemoryLaneItem
from app.timeline.navigation import TimelineNavigation
from app.timeline.rank_grouping import RankGrouping
from app.timeline.span_item import OverlayItem, TimelineItem
from app.timeline.stall_item import StallItem
from app.timeline.state import TimelineState
from app.view_model.lane_data import empty_table
from app.view_model.layer import IterationMark, Layer, LayerStyle
from app.view_model.loaded_job import LoadedJob
from app.view_model.overlay_data import PredictedOverlay, measured_marks
from app.view_model.row_tables import JoinedTables

OVERLAY_MODES: dict[str, str] = {
    "differences": "Differences: predicted outlined only where it differs visibly",
    "ghost": "Ghost: every predicted task outlined over measured",
    "paired": "Paired: measured row, predicted row below",
    "predicted": "Predicted ranks only",
}
# The ghost outline: one colour that stands out against every family colour in either theme. It is
# drawn as rails just outside the measured bars (see span_item.outline_lines), so it never covers them.
GHOST_COLOR = {"light": "#111827", "dark": "#F5F5F5"}
# "Differs visibly": a predicted start or end at least this many device pixels from the measured one
# at the current zoom (two pixels: one is lost in antialiasing and rounding).
VISIBLE_DIFF_PX = 2.0


class PredictionLayers(QObject):
    """The measured and predicted layers and their row layout (see the module docstring)."""

    replacing = Signal()  # the predicted layer is about to change
    installed = Signal()  # new layers and rows are in place

    def __init__(
        self,
        state: TimelineState,
        nav: TimelineNavigation,
        grouping: RankGrouping,
        label_axis: LaneLabelAxis,
        item: TimelineItem,
        memory_item: MemoryLaneItem,
        stall_item: StallItem,
        overlay: OverlayItem,
    ) -> None:
        super().__init__(nav)
        self.state = state
        self.nav = nav
        self.grouping = grouping
        self.label_axis = label_axis
        self.item = item
        self.memory_item = memory_item
        self.stall_item = stall_item
        self.overlay = overlay
        self.show_measured_marks = True
        self.show_reference = True  # measured ranks below predicted ranks built anew

    def set_prediction(self, prediction: PredictedOverlay | None, mode: str | None = None) -> None:
        """Draw ``prediction`` (None: the measured job alone) in ``mode`` (one of OVERLAY_MODES;
        None keeps the current one). Keeps the visible time range, rows and collapsed groups."""
        if mode is not None:
            if mode not in OVERLAY_MODES:
                raise ValueError(f"unknown overlay mode {mode!r}")
            self.state.overlay_mode = mode
        self.state.prediction = prediction
        self.replacing.emit()
        self.apply_layers()

    def set_overlay_mode(self, mode: str) -> None:
        self.set_prediction(self.state.prediction, mode)

    def predicted_style(self, mode: str) -> LayerStyle:
        """How the predicted layer is drawn in ``mode``: the ghost is an outline in one colour in a
        band a little taller than the measured bars (0.1-0.9 of the row), so its rails run just
        outside them; "differences" is the ghost of the tasks that moved visibly, nothing else."""
        if mode in ("ghost", "differences"):
            return LayerStyle(
                y0=0.03,
                height=0.94,
                outline=True,
                labels=False,
                color=GHOST_COLOR.get(self.state.theme.name),
                min_diff_px=VISIBLE_DIFF_PX if mode == "differences" else 0.0,
            )
        return LayerStyle()

    def apply_layers(self, regrouped: bool = False) -> None:
        """Build and install the layers and rows of what is shown; ``regrouped``: the rank
        grouping changed, its collapsed ranks replace the current ones."""
        loaded = self.state.loaded
        if loaded is None:
            return
        pred = self.state.prediction
        mode = self.state.shown_mode
        grouping = self.grouping
        if pred is not None and pred.separate:
            self._apply_separate(loaded, pred)
            return
        layers = [Layer("measured", loaded.job.ranks, loaded.tables)]
        labels: list[str] | None = None
        marks = measured_marks(loaded)
        if pred is not None:
            style = self.predicted_style(mode)
            layers.append(Layer("predicted", pred.ranks, pred.tables, style, pred.deviation or None))
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
        old = self.state.layout_model
        layout = LaneLayout(
            loaded.job.ranks,
            loaded.tables,
            labels if labels is not None else grouping.group_labels,
            paired=mode == "paired",
            only_layer=PREDICTED if mode == "predicted" else None,
            order=grouping.group_order,  # the rank grouping (app.timeline.rank_grouping) applies to both layers
        )
        if regrouped:
            layout.collapsed_ranks = set(grouping.group_collapsed)
            layout.rebuild()
        elif old is not None and len(old.ranks) == len(layout.ranks):
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
        if pred.measured_first:  # another *measured* job: drawn as measured, searchable like it
            layers = [
                Layer("measured", ranks, JoinedTables(loaded.tables, pred.tables)),
                Layer("predicted", ranks, [blank] * (n + m)),
            ]
        else:
            layers = [
                Layer("measured", ranks, JoinedTables(loaded.tables, [blank] * m)),
                Layer("predicted", ranks, JoinedTables([blank] * n, pred.tables)),
            ]
        if pred.measured_first:  # another measured job under the open one
            labels = [f"A rank {t.rank} · measured" for t in loaded.job.ranks] + list(pred.labels)
            order = list(range(n)) + list(range(n, n + m))
        else:
            labels = [f"measured rank {t.rank} · for reference" for t in loaded.job.ranks] + list(pred.labels)
            order = list(range(n, n + m)) + (list(range(n)) if self.show_reference else [])
        layout = LaneLayout(ranks, JoinedTables(loaded.tables, pred.tables), labels, order=order)
        old = self.state.layout_model
        if old is not None and len(old.ranks) == len(ranks) and old.order == order:
            layout.collapsed_ranks = set(old.collapsed_ranks)
            layout.expanded_cpu = set(old.expanded_cpu)
        elif not pred.measured_first:
            layout.collapsed_ranks = set(range(n))  # the reference stays out of the way
        layout.rebuild()
        self._install(layers, layout, [*measured_marks(loaded), *pred.iterations])

    def _install(self, layers: list[Layer], layout: LaneLayout, marks: list[list[IterationMark]]) -> None:
        nav = self.nav
        top, _ = nav.y_range()
        x0, x1 = nav.x_range()
        lo, hi = nav.full_range()
        whole = x0 <= lo + 1e-9 and x1 >= hi - 1e-9  # showing everything: keep showing everything
        self.state.layout_model = layout
        self.label_axis.layout_model = layout
        self.item.set_data(layers, layout, marks)
        self.memory_item.layout = layout  # measured memory bands follow the new rows
        self.stall_item.layout = layout  # and so do the measured lanes' unexplained delays
        nav.set_iterations(marks, reset_cursor=False)
        self.overlay.set_extent(self.item.data_extent())
        nav.sync_scrollbar()
        nav.scroll_to_row(top)
        if whole:
            lo, hi = nav.full_range()
            nav.zoom_to(lo, hi, pad=0.01)
        else:
            nav.view_box.setXRange(x0, x1, padding=0)
        self.label_axis.update()
        self.installed.emit()  # the search's highlights and the selection box follow the new rows
