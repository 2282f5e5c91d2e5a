"""Rank groups on the timeline: a bar above the overview to order the ranks by parallel role (PP
stage, DP replica, TP group, from :mod:`lumos_core.whatif.rank_groups`) and to show one
representative rank per group (expanded) or every member (the others collapsed to their header row).

:class:`RankGrouping` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`: it
works out the rank ``order``, labels and collapsed ranks of the groups and emits
:attr:`RankGrouping.regrouped`; the predicted-layer part builds the lane layout from them. Grouping applies to both layers of a prediction
overlaid on the traced ranks; predicted ranks built anew (another layout) keep their own rows.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QWidget

from app.timeline.state import TimelineState
from app.view_model.loaded_job import LoadedJob, opening_grouping
from lumos_core.api.views import RankGroup, rank_groups

GROUPING_CHOICES = [
    ("all ranks, in rank order", ""),
    ("grouped by PP stage", "pp"),
    ("grouped by DP replica", "dp"),
    ("grouped by TP group", "tp"),
]


def default_grouping(loaded: LoadedJob) -> str:
    """How a job opens: big jobs grouped by pipeline stage (or TP group without a pipeline)."""
    return opening_grouping(len(loaded.job.ranks), loaded.baseline)


class GroupingBar(QWidget):
    """The grouping controls: a choice of grouping and 'one rank per group'."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        for text, key in GROUPING_CHOICES:
            self.combo.addItem(text, key)
        self.combo.setToolTip("Order and group the ranks by their parallel role (from the inferred layout)")
        self.one_per_group = QCheckBox("one rank per group")
        self.one_per_group.setChecked(True)
        self.one_per_group.setToolTip(
            "Show only a representative of each group (a straggler if the group has one, else its lowest "
            "rank), expanded; off: every member, the others collapsed"
        )
        self.note = QLabel("")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 0, 6, 0)
        lay.addWidget(QLabel("Ranks:"))
        lay.addWidget(self.combo)
        lay.addWidget(self.one_per_group)
        lay.addWidget(self.note, 1)


class RankGrouping(QObject):
    """Grouping of the view's ranks (see the module docstring)."""

    regrouped = Signal(bool)  # the groups changed: lay the rows out again (and scroll to the top?)

    def __init__(self, state: TimelineState, bar: GroupingBar) -> None:
        super().__init__(bar)
        self.state = state
        self.grouping_bar = bar
        self.reset()
        bar.combo.currentIndexChanged.connect(lambda _i: self.apply_grouping())
        bar.one_per_group.toggled.connect(lambda _on: self.apply_grouping())

    def reset(self) -> None:
        """No groups (a new job, until its grouping is applied)."""
        self.grouping = ""
        self.groups: list[RankGroup] = []
        self.group_order: list[int] | None = None
        self.group_labels: list[str] | None = None
        self.group_collapsed: set[int] = set()

    def set_grouping(self, by: str, one_per_group: bool = True) -> None:
        """Group by "pp", "dp", "tp" or "" (rank order), showing one rank per group or all."""
        bar = self.grouping_bar
        bar.combo.blockSignals(True)
        bar.one_per_group.blockSignals(True)
        bar.combo.setCurrentIndex(next(i for i, (_t, k) in enumerate(GROUPING_CHOICES) if k == by))
        bar.one_per_group.setChecked(one_per_group)
        bar.combo.blockSignals(False)
        bar.one_per_group.blockSignals(False)
        self.apply_grouping()

    def apply_grouping(self, scroll: bool = True) -> None:
        """Rebuild the rows for the bar's grouping (both layers when a prediction is overlaid on the
        traced ranks; predicted ranks built anew keep their own rows)."""
        lj = self.state.loaded
        if lj is None or self.state.layout_model is None:
            return
        by = self.grouping_bar.combo.currentData() or ""
        one = self.grouping_bar.one_per_group.isChecked()
        self.grouping = by
        ranks = lj.job.ranks
        self.groups, self.group_order, self.group_labels, self.group_collapsed = [], None, None, set()
        self.grouping_bar.note.setText("")
        if by:
            flagged = {r.rank for r in lj.stragglers.flagged} if lj.stragglers is not None else set()
            self.groups = rank_groups(lj.baseline, [t.rank for t in ranks], by, flagged)
            labels = [f"rank {t.rank} · {t.device_name}" for t in ranks]
            order: list[int] = []
            for g in self.groups:
                n = len(g.members)
                rep = g.representative
                labels[rep] = f"{g.label} ({n} rank{'s' * (n != 1)}) ▸ rank {ranks[rep].rank}"
                order.append(rep)
                for m in g.members:
                    if m != rep:
                        labels[m] = f"{g.label} ▸ rank {ranks[m].rank}"
                        self.group_collapsed.add(m)
                        if not one:
                            order.append(m)
            self.group_order, self.group_labels = order, labels
            shown = "one rank each" if one else "every member"
            self.grouping_bar.note.setText(f"{len(self.groups)} groups, {shown} (from {self.groups[0].how})")
        self.regrouped.emit(scroll)

    def group_of(self, rank_index: int) -> RankGroup | None:
        return next((g for g in self.groups if rank_index in g.members), None)

    def reveal_rank(self, rank_index: int) -> None:
        """Make sure the rank has rows: a member hidden behind its group's representative shows
        every member."""
        lm = self.state.layout_model
        if lm is None or lm.order is None or rank_index in lm.order or self.state.shown_mode == "separate":
            return
        if self.grouping:
            self.grouping_bar.one_per_group.setChecked(False)  # applies the grouping again
