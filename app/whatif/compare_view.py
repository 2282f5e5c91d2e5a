"""Compare two scenarios: their predicted timelines one above the other, zoomed and panned
together, and a delta table (iteration time, throughput, breakdown, the kernels and collectives
whose time changes most: :func:`lumos_core.whatif.scenario.compare`).

The time offset shifts B against A (B's time t is drawn where A's time t + offset is), e.g. to line
up iterations that start at different times; "Align iterations" sets it so the first iterations
start together.
"""

from __future__ import annotations

import html
import math

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.panels.summary_panes import TablePane
from app.panels.table_model import Column
from app.theme import LIGHT, Theme
from app.timeline.timeline_view import TimelineView
from app.view_model.loaded_job import LoadedJob
from app.whatif.headline import rate_text
from app.whatif.runner import Scenario
from lumos_core.api.scenarios import DeltaRow, compare


def _num(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return ""
    if float(v).is_integer() and abs(v) < 1e9:
        return f"{int(v):,}"
    return f"{v:,.3f}"


def _signed(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return ""
    return f"{v:+,.3f}" if not float(v).is_integer() else f"{int(v):+,}"


def _pct(v: float) -> str:
    return "" if math.isnan(v) else f"{v:+.1f} %"


def _delta_color(r: DeltaRow) -> QColor | None:
    # more time is worse for the iteration, a kernel or a collective; a breakdown part moving
    # (say, more overlap) is neither good nor bad by itself
    if r.unit != "ms" or r.section == "breakdown" or abs(r.delta) < 1e-6:
        return None
    return QColor("#B42318" if r.delta > 0 else "#1B7F3B")


class ComparePane(QWidget):
    """One side: a title and a timeline of the scenario's predicted ranks."""

    def __init__(self, side: str, theme: Theme) -> None:
        super().__init__()
        self.title = QLabel(f"<b>{side}</b>")
        self.timeline = TimelineView(theme)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.timeline, 1)


class CompareView(QWidget):
    """See the module docstring."""

    pair_changed = Signal(int, int)

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.loaded: LoadedJob | None = None
        self.scenarios: dict[int, Scenario] = {}
        self.a: Scenario | None = None
        self.b: Scenario | None = None
        self.rows: list[DeltaRow] = []
        self._syncing = False

        self.combo_a = QComboBox()
        self.combo_b = QComboBox()
        for c in (self.combo_a, self.combo_b):
            c.setMinimumWidth(120)
            c.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            c.setMinimumContentsLength(12)
            c.activated.connect(self._on_combo)
        swap = QToolButton()
        swap.setText("⇅ Swap")
        swap.clicked.connect(self.swap)
        self.offset = QDoubleSpinBox()
        self.offset.setRange(-1e7, 1e7)
        self.offset.setDecimals(3)
        self.offset.setSuffix(" ms")
        self.offset.setToolTip("Shift B against A: B's time t is drawn where A's time t + offset is")
        self.offset.valueChanged.connect(lambda _v: self._sync_from(self.pane_a.timeline))
        align = QPushButton("Align iterations")
        align.setToolTip("Offset B so that its first iteration starts with A's")
        align.clicked.connect(self.align_iterations)
        self.sync = QCheckBox("Sync zoom/pan")
        self.sync.setChecked(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("A:"))
        top.addWidget(self.combo_a, 1)
        top.addWidget(swap)
        top.addWidget(QLabel("B:"))
        top.addWidget(self.combo_b, 1)
        second = QHBoxLayout()
        second.addWidget(QLabel("B offset:"))
        second.addWidget(self.offset)
        second.addWidget(align)
        second.addWidget(self.sync)
        second.addStretch(1)
        self.pane_a = ComparePane("A", theme)
        self.pane_b = ComparePane("B", theme)
        self.pane_a.timeline.view_changed.connect(lambda: self._sync_from(self.pane_a.timeline))
        self.pane_b.timeline.view_changed.connect(lambda: self._sync_from(self.pane_b.timeline))
        self.deltas = TablePane(
            "compare",
            [
                Column("", lambda r: r.section),
                Column("what", lambda r: r.item),
                Column("unit", lambda r: r.unit),
                Column("A", lambda r: r.a, _num, numeric=True),
                Column("B", lambda r: r.b, _num, numeric=True),
                Column("B − A", lambda r: r.delta, _signed, numeric=True, color=_delta_color),
                Column("change", lambda r: r.delta_pct, _pct, numeric=True),
            ],
            DeltaRow,
        )
        self.deltas.view.setSortingEnabled(False)
        self.empty = QLabel(
            "Select two scenarios in the Scenarios list and press Compare (or pick them above)."
        )
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.pane_a)
        split.addWidget(self.pane_b)
        split.addWidget(self.deltas)
        split.setSizes([330, 330, 260])
        self.split = split
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addLayout(second)
        lay.addWidget(self.empty)
        lay.addWidget(split, 1)
        self._show_empty(True)

    # ---- content
    def set_job(self, loaded: LoadedJob | None) -> None:
        self.loaded = loaded
        self.scenarios = {}
        self.a = self.b = None
        for pane in (self.pane_a, self.pane_b):
            pane.timeline.set_job(None)
        self._refill_combos()
        self._show_empty(True)

    def set_scenarios(self, scenarios: list[Scenario]) -> None:
        """The scenarios to choose from (keeps the pair when both are still there)."""
        self.scenarios = {s.id: s for s in scenarios}
        self._refill_combos()
        if self.a is not None and self.b is not None:
            if self.a.id in self.scenarios and self.b.id in self.scenarios:
                self._update_titles()  # a rename; the timelines stay as they are
            else:
                self.a = self.b = None
                self._show_empty(True)

    def _refill_combos(self) -> None:
        for combo, cur in ((self.combo_a, self.a), (self.combo_b, self.b)):
            combo.blockSignals(True)
            combo.clear()
            for s in self.scenarios.values():
                combo.addItem(s.name, s.id)
            if cur is not None:
                combo.setCurrentIndex(max(combo.findData(cur.id), 0))
            combo.blockSignals(False)

    def show_pair(self, a_id: int, b_id: int) -> None:
        a, b = self.scenarios.get(a_id), self.scenarios.get(b_id)
        if a is None or b is None or self.loaded is None:
            return
        keep_x = self.a is not None
        x_range = self.pane_a.timeline.x_range() if keep_x else None
        self.a, self.b = a, b
        self._refill_combos()
        for pane, s in ((self.pane_a, a), (self.pane_b, b)):
            view = pane.timeline
            if view.loaded is not self.loaded:
                view.set_job(self.loaded)
            view.show_reference = False  # rebuilt ranks alone: the other side is the reference
            view.set_prediction(s.overlay, "predicted")
        self._update_titles()
        self.rows = compare(a.summary, b.summary)
        self.deltas.set_rows(self.rows)
        self._show_empty(False)
        if x_range is not None:
            self.pane_a.timeline.zoom_to(*x_range)
        self._sync_from(self.pane_a.timeline)
        self.pair_changed.emit(a.id, b.id)

    def _update_titles(self) -> None:
        for pane, s, side in ((self.pane_a, self.a, "A"), (self.pane_b, self.b, "B")):
            if s is not None:
                pane.title.setText(
                    f"<b>{side}: {html.escape(s.name)}</b> — <b>{html.escape(rate_text(s.summary))}</b>, "
                    f"{s.summary.iteration_us / 1000:.3f} ms per iteration, {s.summary.world_size} GPUs"
                )

    def swap(self) -> None:
        if self.a is not None and self.b is not None:
            self.offset.setValue(-self.offset.value())
            self.show_pair(self.b.id, self.a.id)

    def align_iterations(self) -> None:
        """Offset so that B's first predicted iteration starts where A's does."""
        if self.a is None or self.b is None:
            return
        sa = _first_iteration_ms(self.a)
        sb = _first_iteration_ms(self.b)
        if sa is not None and sb is not None:
            self.offset.setValue(sa - sb)

    def _on_combo(self, _index: int) -> None:
        a, b = self.combo_a.currentData(), self.combo_b.currentData()
        if a is not None and b is not None:
            self.show_pair(int(a), int(b))

    def _show_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)
        self.split.setVisible(not empty)

    # ---- synchronised views
    def _sync_from(self, source: TimelineView) -> None:
        if self._syncing or not self.sync.isChecked() or self.a is None:
            return
        self._syncing = True
        try:
            off = self.offset.value()
            x0, x1 = source.x_range()
            top, _ = source.y_range()
            if source is self.pane_a.timeline:
                target, shift = self.pane_b.timeline, -off
            else:
                target, shift = self.pane_a.timeline, off
            target.view_box.setXRange(x0 + shift, x1 + shift, padding=0)
            target.scroll_to_row(top)
        finally:
            self._syncing = False

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.pane_a.timeline.apply_theme(theme)
        self.pane_b.timeline.apply_theme(theme)


def _first_iteration_ms(s: Scenario) -> float | None:
    starts = [marks[0].start_ms for marks in s.overlay.iterations if marks]
    return min(starts) if starts else None
