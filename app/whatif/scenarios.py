"""The scenario list: every replay and estimate run, kept by name, to show, compare and export.

Ranked best first by throughput per GPU (model FLOP/s when the model shape is known, so a smaller
model's tokens/s is no gain; else tokens/s, or samples/s where tokens are unknown): a
scenario that does different work per iteration (microbatches, micro-batch size, seq, DP) is
compared on its rate, not its iteration time, and its "vs baseline" column says so. A scenario
whose GPU change the host hid (CPU-paced) says so in that column too.

Clicking a scenario shows it on the timeline (overlay), in the Prediction tab and loads its
changes into the What-if panel. Select two (Ctrl+click) and press Compare. Double-click a name to
rename it.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMenu,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.whatif.headline import cpu_paced_text, ranking_change
from app.whatif.runner import Scenario
from lumos_core.api.scenarios import rank_key

COLUMNS = ["scenario", "GPUs", "rate per GPU", "MFU", "iteration (ms)", "vs baseline", "memory (GiB)"]
RATE, MFU, ITERATION, VS, MEMORY = (COLUMNS.index(c) for c in COLUMNS[2:])
OUT_OF_MEMORY_COLOR = "#DC2626"
_ID = Qt.ItemDataRole.UserRole


class ScenarioList(QWidget):
    """See the module docstring."""

    shown = Signal(int)  # scenario id picked (single selection)
    compare_requested = Signal(int, int)
    remove_requested = Signal(int)
    renamed = Signal(int, str)
    export_timeline_requested = Signal(int)
    export_tables_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        # every column as wide as its contents: in a narrow dock the names stay readable and the
        # list scrolls sideways (a stretched name column was squeezed to "b..." by the others)
        for c in range(len(COLUMNS)):
            self.tree.header().setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(True)
        self.tree.itemSelectionChanged.connect(self._on_selection)
        self.tree.itemChanged.connect(self._on_item_changed)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip("Compare the two selected scenarios (Ctrl+click to select two)")
        self.compare_button.clicked.connect(self._compare)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Export the selected scenario's predicted timeline or tables")
        self.export_button.clicked.connect(
            lambda: self._export_menu().exec(
                self.export_button.mapToGlobal(self.export_button.rect().bottomLeft())
            )
        )
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._remove)
        buttons = QHBoxLayout()
        buttons.addWidget(self.compare_button)
        buttons.addWidget(self.export_button)
        buttons.addStretch(1)
        buttons.addWidget(self.remove_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.tree, 1)
        lay.addLayout(buttons)
        self._filling = False
        self.scenarios: dict[int, Scenario] = {}  # by id: what the rows show, for the ranking
        self._update_buttons()

    # ---- content
    def clear(self) -> None:
        self.tree.clear()
        self.scenarios = {}
        self._update_buttons()

    def _baseline(self):  # type: ignore[no-untyped-def]
        """The traced configuration's replay (what "vs baseline" compares with), if there."""
        return next(
            (
                x.summary
                for x in self.scenarios.values()
                if x.summary.kind == "replay" and not x.summary.changes
            ),
            None,
        )

    def rank(self) -> None:
        """Order the rows best first: throughput per GPU, descending (unknown last, then by age)."""
        keyed = sorted(self.scenarios.values(), key=lambda x: (rank_key(x.summary.throughput), x.id))
        order = [x.id for x in keyed]
        if order == self.ids():
            return
        selected, current = set(self.selected_ids()), self.tree.currentItem()
        self.tree.blockSignals(True)
        items = {
            int(it.data(0, _ID)): it
            for it in (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        }
        while self.tree.topLevelItemCount():
            self.tree.takeTopLevelItem(0)
        for sid in order:
            if sid in items:
                self.tree.addTopLevelItem(items[sid])
                items[sid].setSelected(sid in selected)
        if current is not None:
            self.tree.setCurrentItem(current, 0, self.tree.selectionModel().SelectionFlag.NoUpdate)
        self.tree.blockSignals(False)

    def add(self, s: Scenario, baseline_us: float | None) -> None:
        self._filling = True
        try:
            item = QTreeWidgetItem()
            item.setData(0, _ID, s.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.tree.addTopLevelItem(item)
            self.scenarios[s.id] = s
            self._fill(item, s, baseline_us)
        finally:
            self._filling = False
        self.rank()

    def refresh(self, scenarios: list[Scenario], baseline_us: float | None) -> None:
        """Update the numbers (e.g. once the baseline replay is there)."""
        by_id = {s.id: s for s in scenarios}
        self.scenarios.update({k: v for k, v in by_id.items() if k in self.scenarios})
        self._filling = True
        try:
            for i in range(self.tree.topLevelItemCount()):
                item = self.tree.topLevelItem(i)
                s = by_id.get(int(item.data(0, _ID)))
                if s is not None:
                    self._fill(item, s, baseline_us)
        finally:
            self._filling = False
        self.rank()

    def _fill(self, item: QTreeWidgetItem, s: Scenario, baseline_us: float | None) -> None:
        sm = s.summary
        t = sm.throughput
        item.setText(0, s.name)
        # the job's GPUs, the rate's denominator: a replay of a partial folder (1 of 2 ranks
        # published) simulates fewer ranks than the job ran on, and said "1" beside a rate per 2
        item.setText(1, str(t.world_size))
        item.setText(RATE, t.rate_text())
        item.setToolTip(RATE, f"{t.per_iteration:,.0f} {t.unit} per iteration over {t.world_size} GPUs")
        item.setText(MFU, t.mfu_text().removeprefix("MFU ").replace("unknown", "?"))
        item.setToolTip(
            MFU, t.mfu_unknown or "model FLOPs utilisation: model FLOPs per iteration over the bf16 peak"
        )
        item.setText(ITERATION, f"{sm.iteration_us / 1000:,.3f}")
        if sm.kind == "replay":
            item.setText(VS, f"{sm.replay_error_pct:.2f} % in-sample")
            item.setToolTip(
                VS,
                "replay error, in-sample: mean |error| of the replayed iterations, on a graph "
                "calibrated on those very iterations (lumos replay gives the hold-out figure)",
            )
            item.setForeground(VS, QBrush())
        else:
            base = self._baseline()
            if base is None and baseline_us:
                change, what = 100.0 * (sm.iteration_us / baseline_us - 1), "iteration"
            else:
                change, what = ranking_change(sm, base)
            better = -change if what == "iteration" else change  # > 0: an improvement
            paced = cpu_paced_text(sm)
            item.setText(
                VS,
                f"{change:+.1f} % "
                + {"iteration": "time"}.get(what, what)
                + (" ⚠ CPU-paced" if paced else ""),
            )
            item.setToolTip(
                VS,
                (paced + " Select it for the one-click 'assume GPU-bound'. " if paced else "")
                + (
                    "throughput per GPU vs the baseline: this scenario does different work per "
                    "iteration, so its iteration time alone would mislead"
                    if what == "throughput"
                    else "model FLOP/s per GPU vs the baseline: this scenario changes the model, so "
                    "neither its iteration time nor its tokens/s compare"
                    if what == "FLOP/s"
                    else "iteration time vs the replayed baseline"
                ),
            )
            color = (
                "#B45309"
                if paced
                else "#1B7F3B"
                if better > 0.05
                else "#B42318"
                if better < -0.05
                else "#6B7280"
            )
            item.setForeground(VS, QBrush(QColor(color)))
        mem = (sm.estimate_json or {}).get("memory")
        if mem:  # predicted peak per GPU beside the predicted time; red when it does not fit
            item.setText(MEMORY, f"{mem['peak_bytes'] / 2**30:,.1f}" + ("" if mem["fits"] else " ✗"))
            item.setForeground(MEMORY, QBrush(QColor(OUT_OF_MEMORY_COLOR)) if not mem["fits"] else QBrush())
            item.setToolTip(
                MEMORY,
                f"predicted peak {mem['peak_bytes'] / 2**30:,.2f} GiB per GPU of "
                f"{mem['capacity_bytes'] / 2**30:,.1f} GiB ({mem['gpu']}): "
                + ("fits" if mem["fits"] else "does not fit (out of memory)"),
            )
        else:
            item.setText(MEMORY, "")
        for c in range(1, len(COLUMNS)):
            item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        changes = ", ".join(f"{k}={v}" for k, v in sm.changes.items()) or "the traced configuration"
        item.setToolTip(0, f"{s.name}: {changes} · computed in {s.seconds:.2f} s")

    def remove(self, scenario_id: int) -> None:
        item = self._item(scenario_id)
        if item is not None:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))
        self.scenarios.pop(scenario_id, None)
        self._update_buttons()

    def select(self, scenario_id: int) -> None:
        item = self._item(scenario_id)
        if item is not None:
            self.tree.blockSignals(True)
            self.tree.clearSelection()
            item.setSelected(True)
            self.tree.setCurrentItem(item)
            self.tree.blockSignals(False)
        self._update_buttons()

    def select_pair(self, a: int, b: int) -> None:
        self.tree.blockSignals(True)
        self.tree.clearSelection()
        for sid in (a, b):
            item = self._item(sid)
            if item is not None:
                item.setSelected(True)
        self.tree.blockSignals(False)
        self._update_buttons()

    def selected_ids(self) -> list[int]:
        # oldest first (not list order, which is the ranking), so "compare" puts the earlier
        # scenario (usually the baseline) first
        return sorted(
            int(self.tree.topLevelItem(i).data(0, _ID))
            for i in range(self.tree.topLevelItemCount())
            if self.tree.topLevelItem(i).isSelected()
        )

    def ids(self) -> list[int]:
        return [int(self.tree.topLevelItem(i).data(0, _ID)) for i in range(self.tree.topLevelItemCount())]

    def _item(self, scenario_id: int) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if int(item.data(0, _ID)) == scenario_id:
                return item
        return None

    # ---- interaction
    def _on_selection(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 1:
            self.shown.emit(ids[0])
        self._update_buttons()

    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        if not self._filling and column == 0:
            self.renamed.emit(int(item.data(0, _ID)), item.text(0).strip())

    def _update_buttons(self) -> None:
        n = len(self.selected_ids())
        self.compare_button.setEnabled(n == 2)
        self.export_button.setEnabled(n == 1)
        self.remove_button.setEnabled(n >= 1)

    def _compare(self) -> None:
        ids = self.selected_ids()
        if len(ids) == 2:
            self.compare_requested.emit(ids[0], ids[1])

    def _remove(self) -> None:
        for sid in self.selected_ids():
            self.remove_requested.emit(sid)

    def _export_menu(self) -> QMenu:
        menu = QMenu(self)
        ids = self.selected_ids()
        if len(ids) == 1:
            sid = ids[0]
            menu.addAction(
                "Predicted timeline as Kineto/Perfetto JSON…",
                lambda: self.export_timeline_requested.emit(sid),
            )
            menu.addAction("Tables as CSV…", lambda: self.export_tables_requested.emit(sid))
        return menu

    def _context_menu(self, pos) -> None:  # type: ignore[no-untyped-def]
        menu = self._export_menu()
        ids = self.selected_ids()
        if len(ids) == 2:
            menu.addAction("Compare", self._compare)
        if ids:
            menu.addAction("Remove", self._remove)
        if not menu.isEmpty():
            menu.exec(self.tree.viewport().mapToGlobal(pos))
