"""The predicted layer of the timeline: the ranks of a replay or an estimate drawn with the
measured ones, in one of :data:`OVERLAY_MODES` (an outline of the predicted tasks that differ visibly
from the measured ones, a ghost outline of every predicted task, a predicted row under every
measured row, or the predicted ranks alone), or in rows of their own when the estimator rebuilt the
ranks.

:class:`PredictionLayers` is one part of :class:`~app.timeline.timeline_view.TimelineView`: it
builds the layers and the row layout for what is shown and installs them, keeping the visible time
range, rows and collapsed groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Signal

from app.loaded_job import LoadedJob
from app.theme import Theme
from app.timeline.canvas import LaneLabelAxis, TimelineViewBox
from app.timeline.hit import PREDICTED, Hit
from app.timeline.lane_data import empty_table
from app.timeline.lane_layout import LaneLayout
from app.timeline.layer import IterationMark, Layer, LayerStyle
from app.timeline.memory_lane import MemoryLaneItem
from app.timeline.overlay_data import PredictedOverlay, measured_marks
from app.timeline.row_tables import JoinedTables
from app.timeline.span_item import OverlayItem, TimelineItem
from app.timeline.stall_item import StallItem

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


class PredictionLayers:
    """The measured and predicted layers and their row layout (see the module docstring)."""

    theme: Theme
    loaded: LoadedJob | None
    layout_model: LaneLayout | None
    label_axis: LaneLabelAxis
    view_box: TimelineViewBox
    item: TimelineItem
    overlay: OverlayItem
    memory_item: MemoryLaneItem
    stall_item: StallItem
    selected: Hit | None
    hover_hit: Hit | None
    match_masks: list[np.ndarray | None]
    selection_changed: Signal

    prediction: PredictedOverlay | None = None
    overlay_mode = "ghost"
    show_measured_marks = True
    show_reference = True  # measured ranks below predicted ranks built anew

    # the rank grouping's order, labels and collapsed ranks (set by app.timeline.rank_grouping)
    group_order: list[int] | None = None
    group_labels: list[str] | None = None
    group_collapsed: set[int] = set()
    regrouped = False  # the grouping changed: its collapsed ranks replace the current ones

    if TYPE_CHECKING:  # provided by the navigation and selection parts of the view

        def x_range(self) -> tuple[float, float]: ...
        def y_range(self) -> tuple[float, float]: ...
        def full_range(self) -> tuple[float, float]: ...
        def zoom_to(self, x0: float, x1: float, pad: float = 0.0) -> None: ...
        def scroll_to_row(self, top: float) -> None: ...
        def sync_scrollbar(self) -> None: ...
        def set_iterations(self, marks: list[list[IterationMark]], reset_cursor: bool) -> None: ...
        def refresh_overlay(self) -> None: ...

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
                color=GHOST_COLOR.get(self.theme.name),
                min_diff_px=VISIBLE_DIFF_PX if mode == "differences" else 0.0,
            )
        return LayerStyle()

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
        old = self.layout_model
        layout = LaneLayout(
            loaded.job.ranks,
            loaded.tables,
            labels if labels is not None else self.group_labels,
            paired=mode == "paired",
            only_layer=PREDICTED if mode == "predicted" else None,
            order=self.group_order,  # the rank grouping (app.timeline.rank_grouping) applies to both layers
        )
        if self.regrouped:
            self.regrouped = False
            layout.collapsed_ranks = set(self.group_collapsed)
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
        old = self.layout_model
        if old is not None and len(old.ranks) == len(ranks) and old.order == order:
            layout.collapsed_ranks = set(old.collapsed_ranks)
            layout.expanded_cpu = set(old.expanded_cpu)
        elif not pred.measured_first:
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
        self.memory_item.layout = layout  # measured memory bands follow the new rows
        self.stall_item.layout = layout  # and so do the measured lanes' unexplained delays
        if self.match_masks:
            self.item.set_match_masks(self.match_masks)
        self.set_iterations(marks, reset_cursor=False)
        self.overlay.set_extent(self.item.data_extent())
        self.sync_scrollbar()
        self.scroll_to_row(top)
        if whole:
            lo, hi = self.full_range()
            self.zoom_to(lo, hi, pad=0.01)
        else:
            self.view_box.setXRange(x0, x1, padding=0)
        self.refresh_overlay()
        self.label_axis.update()
