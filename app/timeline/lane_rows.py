"""The rows of the timeline: collapsing and expanding a rank or its CPU lanes, laying the rows out
again, jumping to a rank, and keeping the overview strip in step with the rows and time in view.

:class:`LaneRows` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`; it
changes the shared state's ``layout_model`` in place and tells the span, memory and stall items
the new extent. :attr:`LaneRows.relaid` tells the other parts the rows moved.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.timeline.canvas import LaneLabelAxis, TimelineCanvas
from app.timeline.lane_layout import RowKind
from app.timeline.memory_lane import MemoryLaneItem
from app.timeline.navigation import TimelineNavigation
from app.timeline.overview import OverviewStrip
from app.timeline.rank_grouping import RankGrouping
from app.timeline.span_item import OverlayItem, TimelineItem
from app.timeline.stall_item import StallItem
from app.timeline.state import TimelineState


class LaneRows(QObject):
    """Collapse, expand and jump through the rows (see the module docstring)."""

    relaid = Signal()  # rows were collapsed or expanded: what is drawn on them follows

    def __init__(
        self,
        state: TimelineState,
        nav: TimelineNavigation,
        grouping: RankGrouping,
        canvas: TimelineCanvas,
        label_axis: LaneLabelAxis,
        overview: OverviewStrip,
        items: tuple[TimelineItem, OverlayItem, MemoryLaneItem, StallItem],
    ) -> None:
        super().__init__(canvas)
        self.state = state
        self.nav = nav
        self.grouping = grouping
        self.canvas = canvas
        self.label_axis = label_axis
        self.overview = overview
        self.item, self.overlay, self.memory_item, self.stall_item = items
        label_axis.sigRowClicked.connect(self.toggle_row)
        nav.view_box.sigResized.connect(self.follow_overview)
        overview.rank_clicked.connect(self.jump_to_rank)

    def toggle_row(self, row_index: int) -> None:
        lm = self.state.layout_model
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
        extent = self.item.data_extent()
        self.overlay.set_extent(extent)
        self.memory_item.set_extent(extent)
        self.stall_item.set_extent(extent)
        self.nav.sync_scrollbar()
        top, _ = self.nav.y_range()
        self.nav.scroll_to_row(top)
        self.relaid.emit()
        self.label_axis.update()

    def set_all_ranks_collapsed(self, collapsed: bool) -> None:
        if self.state.layout_model:
            self.state.layout_model.set_all_ranks_collapsed(collapsed)
            self.relayout()

    def set_all_cpu_expanded(self, expanded: bool) -> None:
        if self.state.layout_model:
            self.state.layout_model.set_all_cpu_expanded(expanded)
            self.relayout()

    def jump_to_rank(self, rank_index: int) -> None:
        """Scroll the lanes so that the rank's header row is the top row."""
        self.grouping.reveal_rank(rank_index)
        lm = self.state.layout_model
        if lm is None or not 0 <= rank_index < len(lm.group_bounds):
            return
        first, end = lm.group_bounds[rank_index]
        if end > first:  # a rank left out of the display order has no rows
            self.nav.scroll_to_row(float(first))

    def ranks_in_view(self) -> tuple[int, int]:
        """Smallest and largest rank index with a row in view ((0, -1) when none)."""
        lm = self.state.layout_model
        if lm is None or not lm.rows:
            return 0, -1
        top, bottom = self.nav.y_range()
        r0 = min(max(int(top), 0), len(lm.rows) - 1)
        r1 = min(max(int(bottom), 0), len(lm.rows) - 1)
        shown = {lm.rows[r].rank_index for r in range(r0, r1 + 1)}
        return min(shown), max(shown)

    def follow_overview(self, *_: object) -> None:
        """The overview follows the x range and the plot area, and outlines the ranks in view."""
        if not self.overview.ranks or self.overview.isHidden():
            return
        area = self.canvas.mapFromScene(self.nav.view_box.sceneBoundingRect()).boundingRect()
        x0, x1 = self.nav.x_range()
        self.overview.in_view = self.ranks_in_view()
        self.overview.follow(x0, x1, float(area.left()), float(area.width()))
