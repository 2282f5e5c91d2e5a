"""The Sweep dialog's views of its rows: iteration time and breakdown against one swept knob (the
other swept knobs held at the values picked in *slice*), a Pareto view of time against GPUs, the
table, and the configuration picked in any of them.

:class:`GridViews` is a widget owned by :class:`~app.sweep.sweep_dialog.GridSweepDialog`. It holds
the rows it draws: ``grid``, ``rows`` (key -> row, as they arrive) and ``keys`` (grid order), all
written by the dialog, and keeps ``shown`` (the table's rows) and ``selected`` (the picked key).
It asks the dialog for work through signals (make a scenario, save, sweep again GPU-bound); the
dialog says whether a sweep is ``running`` (rows cannot be saved half-way).
"""

from __future__ import annotations

import html
import itertools
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.panels.cpu_paced_banner import CpuPacedBanner
from app.panels.summary_panes import TablePane
from app.panels.table_model import Column
from app.sweep.pareto_chart import OUT_OF_MEMORY_COLOR, ParetoChart
from app.sweep.sweep_view import SweepChart, row_columns
from app.theme import Theme
from lumos_core.api.knobs import GPU_BOUND_CPU_SCALE, WORK_KNOBS, format_changes
from lumos_core.api.sweep import Grid, GridRow, point_key

VS_KNOB, PARETO = "knob", "pareto"


def grid_table() -> TablePane:
    """The table of a grid's rows (one column per number the sweep learns). Rows that were skipped
    or do not fit in GPU memory are greyed out; the problem column says why."""
    first = Column("configuration", lambda r: r.key)
    pane = TablePane("sweep", row_columns(first, tokens=True, memory=True), GridRow)
    pane.model.muted = lambda r: not r.ok
    return pane


class GridViews(QWidget):
    """Charts, table and the picked configuration (see the module docstring)."""

    scenario_wanted = Signal()  # the picked configuration, as a scenario
    save_wanted = Signal()
    gpu_bound_wanted = Signal(dict)  # the cpu_scale change to sweep again with

    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        """The charts over the table, and the row under them (picked configuration, buttons)."""
        super().__init__(parent)
        self.grid: Grid | None = None
        self.rows: dict[str, GridRow] = {}
        self.keys: list[str] = []
        self.shown: list[GridRow] = []
        self.selected: str | None = None
        self.running = False
        self.view_combo = QComboBox()
        self.view_combo.addItem("Iteration time vs knob", VS_KNOB)
        self.view_combo.addItem("Pareto: time vs GPUs", PARETO)
        self.view_combo.currentIndexChanged.connect(self.refresh_views)
        self.x_combo = QComboBox()
        self.x_combo.setToolTip("the swept knob along the x axis")
        self.x_combo.currentIndexChanged.connect(self._on_x_changed)
        self.slice_combo = QComboBox()
        self.slice_combo.setToolTip("values of the other swept knobs for this chart")
        self.slice_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.slice_combo.currentIndexChanged.connect(self.refresh_views)
        self.knob_chart = SweepChart(theme)
        self.knob_chart.scene().sigMouseClicked.connect(self.knob_chart_clicked)
        self.pareto = ParetoChart(theme)
        self.pareto.point_clicked.connect(lambda i: self.select(self._pareto_rows[i].key))
        self._pareto_rows: list[GridRow] = []
        self.charts = QStackedWidget()
        self.charts.addWidget(self.knob_chart)
        self.charts.addWidget(self.pareto)
        view_row = QHBoxLayout()
        view_row.addWidget(QLabel("View:"))
        view_row.addWidget(self.view_combo)
        self.x_label = QLabel("x:")
        view_row.addWidget(self.x_label)
        view_row.addWidget(self.x_combo)
        self.slice_label = QLabel("slice:")
        view_row.addWidget(self.slice_label)
        view_row.addWidget(self.slice_combo)
        view_row.addStretch(1)

        self.table = grid_table()
        self.table.export_button.hide()  # rows are saved as a results file (Save CSV)
        self.table.view.setSortingEnabled(False)
        self.table.view.clicked.connect(self._on_table_clicked)
        self.table.view.setToolTip("Double-click a configuration to make it a scenario")
        self.scenario_button = QPushButton("Make scenario")
        self.scenario_button.setToolTip("Estimate the picked configuration with its timeline (a scenario)")
        self.save_button = QPushButton("Save CSV…")
        self.save_button.setToolTip("The rows as a results file (as lumos sweep --out)")
        self.picked = QLabel()
        bottom_row = QHBoxLayout()
        bottom_row.addWidget(self.picked, 1)
        bottom_row.addWidget(self.save_button)
        bottom_row.addWidget(self.scenario_button)

        chart_box = QWidget()
        cl = QVBoxLayout(chart_box)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addLayout(view_row)
        self.chart_note = QLabel()
        self.chart_note.setWordWrap(True)
        self.cpu_banner = CpuPacedBanner(
            f"Assume GPU-bound (Host time × {GPU_BOUND_CPU_SCALE}) and sweep again"
        )
        cl.addWidget(self.cpu_banner)
        cl.addWidget(self.chart_note)
        cl.addWidget(self.charts, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(chart_box)
        split.addWidget(self.table)
        split.setSizes([480, 220])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(split, 1)
        lay.addLayout(bottom_row)
        self.table.view.doubleClicked.connect(lambda _i: self.scenario_wanted.emit())
        self.scenario_button.clicked.connect(lambda: self.scenario_wanted.emit())
        self.save_button.clicked.connect(lambda: self.save_wanted.emit())
        self.cpu_banner.gpu_bound_requested.connect(self.gpu_bound_wanted)

    def start(self, grid: Grid, keys: list[str]) -> None:
        """A new grid, no row arrived yet: its x axis and slice choices."""
        self.grid, self.keys, self.rows, self.selected = grid, keys, {}, None
        self.fill_view_controls(grid)
        self.refresh_views()

    def apply_theme(self, theme: Theme) -> None:
        self.knob_chart.apply_theme(theme)
        self.pareto.apply_theme(theme)
        self.refresh_views()

    def fill_view_controls(self, grid: Grid) -> None:
        """The x axis and slice choices of a new grid."""
        self.x_combo.blockSignals(True)
        self.x_combo.clear()
        for knob, values in grid.knobs.items():
            self.x_combo.addItem(f"{knob} ({len(values)})", knob)
        # the knob with most values reads best along the axis
        best = max(range(len(grid.knobs)), key=lambda i: len(list(grid.knobs.values())[i]))
        self.x_combo.setCurrentIndex(best)
        self.x_combo.blockSignals(False)
        self._fill_slices()
        if len(grid.knobs) == 1:
            self.view_combo.setCurrentIndex(self.view_combo.findData(VS_KNOB))

    def _on_x_changed(self) -> None:
        self._fill_slices()
        self.refresh_views()

    def _fill_slices(self) -> None:
        grid = self.grid
        self.slice_combo.blockSignals(True)
        self.slice_combo.clear()
        if grid is not None:
            x = self.x_combo.currentData()
            others = [k for k in grid.knobs if k != x]
            for combo in itertools.product(*(grid.knobs[k] for k in others)):
                held = dict(zip(others, combo))
                self.slice_combo.addItem(format_changes(held) or "(no other knob)", held)
        self.slice_combo.blockSignals(False)
        self.slice_combo.setEnabled(self.slice_combo.count() > 1)

    def slice_rows(self) -> list[GridRow]:
        """The arrived rows of the chosen slice, in the order of the x knob's values."""
        grid, x = self.grid, self.x_combo.currentData()
        if grid is None or x is None:
            return []
        held = self.slice_combo.currentData() or {}
        out = []
        for value in grid.knobs[x]:
            key = point_key({**grid.fixed, **held, x: value})
            if key in self.rows:
                out.append(self.rows[key])
        return out

    def refresh_views(self) -> None:
        """Redraw the table and the chart shown from the rows that arrived."""
        mode = self.view_combo.currentData()
        self.charts.setCurrentWidget(self.pareto if mode == PARETO else self.knob_chart)
        for w in (self.x_label, self.x_combo, self.slice_label, self.slice_combo):
            w.setVisible(mode == VS_KNOB)
        self.shown = [self.rows[k] for k in self.keys if k in self.rows]
        by_rate = self.by_throughput()
        # configurations doing different work per iteration: ranked by rate, best first
        self.table.set_rows(self.shown, sort_column=self.rate_column if by_rate else None)
        self._show_cpu_paced()
        if mode == PARETO:
            self._pareto_rows = self.shown
            sel = next((i for i, r in enumerate(self.shown) if r.key == self.selected), None)
            self.pareto.set_rows(self.shown, sel, "throughput" if by_rate else "time")
            n = len(self.pareto.front)
            best = "has as much throughput" if by_rate else "is as fast"
            self.chart_note.setText(
                f"{n} configuration(s) on the Pareto front (red): no other {best} with as few GPUs."
                if n
                else ""
            )
        else:
            x = str(self.x_combo.currentData() or "")
            rows = self.slice_rows()
            bad = next((r for r in rows if not r.ok), None)
            if rows and not any(r.ok for r in rows) and bad is not None:
                rows = []  # nothing to draw (and pyqtgraph warns on an all-NaN line)
                self.chart_note.setText(
                    f"No configuration of this slice can be estimated: {html.escape(bad.note)}"
                )
            else:
                self.chart_note.setText("")
            self.knob_chart.set_rows(x, rows)
        self.show_selection()

    def by_throughput(self) -> bool:
        """Do the grid's configurations do different work per iteration (and is the rate known)?"""
        grid = self.grid
        if grid is None or not any(k in WORK_KNOBS for k in grid.knobs):
            return False
        return any(r.ok and r.tokens_per_s_per_gpu == r.tokens_per_s_per_gpu for r in self.shown)

    @property
    def rate_column(self) -> int:
        return next(i for i, c in enumerate(self.table.model.columns) if c.header == "tokens/s/GPU")

    def _show_cpu_paced(self) -> None:
        """The banner over the charts when the host hid the sweep's GPU what-ifs."""
        paced = [r for r in self.shown if r.cpu_paced == r.cpu_paced]
        if not paced:
            self.cpu_banner.show_text("", {})
            return
        share = max(r.cpu_paced for r in paced)
        changes = [r.change_pct for r in paced]
        self.cpu_banner.show_text(
            f"CPU-paced by {100 * share:.0f} %: the host (Python, launch calls) sets this trace's pace, so "
            f"{len(paced)} of these GPU what-ifs barely move the iteration ({min(changes):+.1f} to "
            f"{max(changes):+.1f} %).",
            {"cpu_scale": GPU_BOUND_CPU_SCALE},
        )

    def knob_chart_clicked(self, ev: Any) -> None:
        """A click on the time-vs-knob chart picks the bar under it."""
        rows = self.slice_rows()
        if not rows:
            return
        x = self.knob_chart.plotItem.vb.mapSceneToView(ev.scenePos()).x()
        i = round(x)
        if 0 <= i < len(rows) and abs(x - i) < 0.45:
            self.select(rows[i].key)

    def _on_table_clicked(self, index: Any) -> None:
        row = self.table.proxy.mapToSource(index).row()
        if 0 <= row < len(self.shown):
            self.select(self.shown[row].key, from_table=True)

    def select(self, key: str, from_table: bool = False) -> None:
        """Pick a configuration (chart or table): it is what Make scenario estimates."""
        self.selected = key
        if not from_table and key in self.rows:
            i = next((n for n, r in enumerate(self.shown) if r.key == key), None)
            if i is not None:
                self.table.view.selectRow(self.table.proxy.mapFromSource(self.table.model.index(i, 0)).row())
        if self.view_combo.currentData() == PARETO:
            sel = next((i for i, r in enumerate(self.shown) if r.key == key), None)
            self.pareto.set_rows(self.shown, sel)
        self.show_selection()

    def show_selection(self) -> None:
        row = self.rows.get(self.selected or "")
        self.scenario_button.setEnabled(row is not None and row.ok)
        self.save_button.setEnabled(bool(self.rows) and not self.running)
        if row is None:
            self.picked.setText("Pick a configuration in the chart or the table.")
        elif row.ok:
            rate = (
                ""
                if row.tokens_per_s_per_gpu != row.tokens_per_s_per_gpu
                else f"{row.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
            )
            mfu = "" if row.mfu != row.mfu else f"MFU {100 * row.mfu:.1f} %, "
            self.picked.setText(
                f"<b>{html.escape(row.key)}</b>: <b>{rate}{mfu}</b>{row.iteration_us / 1000:.3f} ms on "
                f"{row.world_size} GPUs ({row.change_pct:+.1f} % vs the replayed baseline)"
            )
        elif row.estimated:  # estimated, but does not fit in memory: no answer
            self.picked.setText(
                f"<b>{html.escape(row.key)}</b>: <span style='color:{OUT_OF_MEMORY_COLOR}'>"
                f"{html.escape(row.note)}</span> (predicted {row.iteration_us / 1000:.3f} ms on "
                f"{row.world_size} GPUs; not a candidate)"
            )
        else:
            self.picked.setText(f"<b>{html.escape(row.key)}</b>: skipped — {html.escape(row.note)}")
