"""The Sweep dialog: a grid over the What-if panel's knobs, estimated in the background by the same
engines as ``lumos sweep`` (a local process pool, or Ray), drawn as it fills in.

Type values for any knobs (``8, 16, 32`` or ``8-512`` for powers of two); the other knobs keep the
What-if panel's values (or the traced ones). Each configuration is :func:`lumos_core.sweep.point.
estimate_point`, so a point's numbers are those of ``lumos estimate``. Invalid combinations become
skipped rows with the reason. Two views: iteration time and breakdown against one swept knob (the
other swept knobs held at the values picked in *slice*), or a Pareto view of time against GPUs.
Pick a point (table or chart) and *Make scenario* estimates it with its timeline, as the panel would.

The local engine starts its worker processes with forkserver (the GUI has threads, and forking a
threaded process can deadlock); the loaded job and graph are sent to each worker once.
"""

from __future__ import annotations

import html
import itertools
import math
import os
import time
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.jobs import BackgroundTask
from app.panels.summary_panes import TablePane
from app.panels.table_model import Column
from app.sweep.pareto_chart import ParetoChart
from app.sweep.sweep_view import SweepChart
from app.theme import Theme
from app.whatif.config_panel import GROUPS
from lumos_core.errors import LumosError
from lumos_core.progress import scaled
from lumos_core.sweep.engines import Engine, LocalEngine, RayEngine
from lumos_core.sweep.grid import Grid, parse_grid
from lumos_core.sweep.one_knob import SweepPoint, default_values
from lumos_core.sweep.point import GridRow
from lumos_core.sweep.results import ResultsFile
from lumos_core.sweep.run import SweepReport, run_grid
from lumos_core.whatif.knobs import INT_KNOBS, format_changes

if TYPE_CHECKING:
    from app.whatif.workbench import WhatIfWorkbench

KNOBS = [(knob, label) for _, knobs in GROUPS for knob, label, _ in knobs]
VS_KNOB, PARETO = "knob", "pareto"
_REFRESH_MS = 150  # rows arrive quickly: redraw at most this often


def _ms(v: float) -> str:
    return "" if math.isnan(v) else f"{v:,.3f}"


def _bd_ms(row: GridRow, part: str) -> float:
    b = row.breakdown
    return math.nan if b is None else getattr(b, part) / 1e6


class _RowRelay(QObject):
    """Carries rows from the sweep's worker thread to the GUI thread (queued signal)."""

    row = Signal(int, object)  # token, GridRow


class GridSweepDialog(QDialog):
    """See the module docstring. Created by the workbench; :meth:`shutdown` before it goes away."""

    scenario_requested = Signal(dict)  # changes

    def __init__(self, workbench: WhatIfWorkbench) -> None:
        super().__init__(workbench.window)
        self.setWindowTitle("Sweep")
        self.setModal(False)
        self.resize(1100, 800)
        self.workbench = workbench
        self.runner = workbench.runner
        self.grid: Grid | None = None
        self.rows: dict[str, GridRow] = {}
        self.keys: list[str] = []  # the grid's configurations, in grid order
        self.shown: list[GridRow] = []  # table rows (arrived, grid order)
        self.selected: str | None = None
        self.report: SweepReport | None = None
        self.task: BackgroundTask | None = None
        self.ray_engine: RayEngine | None = None
        self.last_error = ""
        self._token = 0
        self._started_at = 0.0
        self._relay = _RowRelay(self)
        self._relay.row.connect(self._on_row)
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(_REFRESH_MS)
        self._refresh_timer.timeout.connect(self._refresh)
        theme = workbench.window.theme

        # ---- the grid: one line per knob of the What-if panel
        knob_box = QGroupBox("Knobs to sweep (empty: as in the What-if panel)")
        form = QGridLayout(knob_box)
        form.setVerticalSpacing(2)
        self.editors: dict[str, QLineEdit] = {}
        self.traced: dict[str, QLabel] = {}
        for row, (knob, label) in enumerate(KNOBS):
            form.addWidget(QLabel(label), row // 2, (row % 2) * 3)
            traced = QLabel()
            traced.setStyleSheet("color: #6B7280;")
            form.addWidget(traced, row // 2, (row % 2) * 3 + 1)
            edit = QLineEdit()
            edit.setClearButtonEnabled(True)
            edit.returnPressed.connect(self.run)
            edit.textChanged.connect(self._on_grid_edited)
            form.addWidget(edit, row // 2, (row % 2) * 3 + 2)
            self.editors[knob] = edit
            self.traced[knob] = traced
        self.grid_label = QLabel()
        self.grid_label.setWordWrap(True)

        # ---- engine and run controls
        self.engine_combo = QComboBox()
        self.engine_combo.addItem("Local processes", "local")
        self.engine_combo.addItem("Ray", "ray")
        self.engine_combo.currentIndexChanged.connect(self._on_engine_changed)
        self.workers = QSpinBox()
        self.workers.setRange(1, 1024)
        self.workers.setValue(os.cpu_count() or 1)
        self.workers.setToolTip(
            "parallel workers (Ray: CPUs of the local instance, tasks in flight on a cluster)"
        )
        self.address = QLineEdit()
        self.address.setPlaceholderText("Ray address (empty: a local Ray instance)")
        self.run_button = QPushButton("Run sweep")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.status = QLabel()
        self.status.setWordWrap(True)
        engine_row = QHBoxLayout()
        engine_row.addWidget(QLabel("Engine:"))
        engine_row.addWidget(self.engine_combo)
        engine_row.addWidget(QLabel("Workers:"))
        engine_row.addWidget(self.workers)
        engine_row.addWidget(self.address, 1)
        engine_row.addWidget(self.run_button)
        engine_row.addWidget(self.cancel_button)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.status, 2)

        # ---- views
        self.view_combo = QComboBox()
        self.view_combo.addItem("Iteration time vs knob", VS_KNOB)
        self.view_combo.addItem("Pareto: time vs GPUs", PARETO)
        self.view_combo.currentIndexChanged.connect(self._refresh)
        self.x_combo = QComboBox()
        self.x_combo.setToolTip("the swept knob along the x axis")
        self.x_combo.currentIndexChanged.connect(self._on_x_changed)
        self.slice_combo = QComboBox()
        self.slice_combo.setToolTip("values of the other swept knobs for this chart")
        self.slice_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.slice_combo.currentIndexChanged.connect(self._refresh)
        self.knob_chart = SweepChart(theme)
        self.knob_chart.scene().sigMouseClicked.connect(self._on_knob_chart_clicked)
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

        self.table = TablePane(
            "sweep",
            [
                Column("configuration", lambda r: r.key),
                Column("GPUs", lambda r: r.world_size, numeric=True),
                Column("iteration (ms)", lambda r: r.iteration_us / 1000, _ms, numeric=True),
                Column(
                    "compute", lambda r: _bd_ms(r, "exposed_compute_ns"), _ms, "exposed compute (ms)", True
                ),
                Column("overlapped", lambda r: _bd_ms(r, "overlapped_ns"), _ms, numeric=True),
                Column(
                    "comm", lambda r: _bd_ms(r, "exposed_comm_ns"), _ms, "exposed communication (ms)", True
                ),
                Column("idle", lambda r: _bd_ms(r, "other_ns"), _ms, numeric=True),
                Column(
                    "vs baseline",
                    lambda r: r.change_pct,
                    lambda v: "" if math.isnan(v) else f"{v:+.1f} %",
                    numeric=True,
                ),
                Column(
                    "tokens/s/GPU",
                    lambda r: r.tokens_per_s_per_gpu,
                    lambda v: "" if math.isnan(v) else f"{v:,.0f}",
                    numeric=True,
                ),
                Column("problem", lambda r: "" if r.ok else r.note),
            ],
            GridRow,
        )
        self.table.export_button.hide()  # rows are saved as a results file (Save CSV)
        self.table.view.setSortingEnabled(False)
        self.table.view.clicked.connect(self._on_table_clicked)
        self.table.view.doubleClicked.connect(lambda _i: self.make_scenario())
        self.table.view.setToolTip("Double-click a configuration to make it a scenario")
        self.scenario_button = QPushButton("Make scenario")
        self.scenario_button.setToolTip("Estimate the picked configuration with its timeline (a scenario)")
        self.scenario_button.clicked.connect(self.make_scenario)
        self.save_button = QPushButton("Save CSV…")
        self.save_button.setToolTip("The rows as a results file (as lumos sweep --out)")
        self.save_button.clicked.connect(self.ask_save)
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
        cl.addWidget(self.chart_note)
        cl.addWidget(self.charts, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(chart_box)
        split.addWidget(self.table)
        split.setSizes([480, 220])
        lay = QVBoxLayout(self)
        lay.addWidget(knob_box)
        lay.addWidget(self.grid_label)
        lay.addLayout(engine_row)
        lay.addLayout(progress_row)
        lay.addWidget(split, 1)
        lay.addLayout(bottom_row)

        self.open_action = QAction("S&weep Grid…", workbench.window)
        self.open_action.setShortcut(QKeySequence("Ctrl+Shift+W"))
        self.open_action.triggered.connect(self.open_dialog)
        self.panel_button = QPushButton("Sweep these knobs…")
        self.panel_button.setToolTip("Sweep a grid of these knobs in the background (time vs knob, Pareto)")
        self.panel_button.clicked.connect(self.open_dialog)
        _add_to_panel_buttons(workbench.panel, self.panel_button)
        self.scenario_requested.connect(lambda changes: workbench.request_estimate(changes))
        self.runner.baseline_changed.connect(self._on_baseline_changed)
        self._on_engine_changed()
        self._on_baseline_changed()
        self._set_running(False)

    # ---------------------------------------------------------------- grid
    def open_dialog(self) -> None:
        self._on_grid_edited()
        self.show()
        self.raise_()
        self.activateWindow()

    def set_grid_text(self, values: dict[str, str]) -> None:
        """Fill the knob fields (``{"dp": "8, 16"}``); the others are cleared."""
        for knob, edit in self.editors.items():
            edit.setText(values.get(knob, ""))

    def held_changes(self) -> dict[str, Any]:
        """The What-if panel's changes, held for every configuration (swept knobs left out)."""
        try:
            changes = self.workbench.panel.changes()
        except LumosError:
            return {}
        return {k: v for k, v in changes.items() if not self.editors[k].text().strip()}

    def current_grid(self) -> Grid:
        """The grid the fields describe (raises LumosError with what is wrong)."""
        text = " ".join(f"{k}={e.text().strip()}" for k, e in self.editors.items() if e.text().strip())
        if not text:
            raise LumosError("type values for at least one knob, e.g. DP: 8, 16, 32")
        return parse_grid(text, self.held_changes())

    def _on_grid_edited(self) -> None:
        try:
            grid = self.current_grid()
        except LumosError as exc:
            self.grid_label.setText(f"<span style='color:#B42318'>{html.escape(str(exc))}</span>")
            return
        held = f"; held: {format_changes(grid.fixed)}" if grid.fixed else ""
        self.grid_label.setText(f"{grid.size} configuration(s){html.escape(held)}")

    def _on_baseline_changed(self) -> None:
        b = self.runner.baseline
        for knob, label in self.traced.items():
            v = getattr(b.config, knob) if b is not None else None
            label.setText(
                "traced: ?" if v is None else f"traced: {v:g}" if isinstance(v, float) else f"traced: {v}"
            )
            suggestions: list[Any] = []
            if knob == "gpu":
                suggestions = default_values(knob, v)
            elif knob in INT_KNOBS and v:
                suggestions = default_values(knob, v, limit=int(v) * 8)
            self.editors[knob].setPlaceholderText(", ".join(str(x) for x in suggestions[:6]))
        self.run_button.setEnabled(b is not None and self.task is None)
        if b is not None and not any(e.text().strip() for e in self.editors.values()):
            self.editors["dp"].setText(
                ", ".join(str(x) for x in default_values("dp", b.config.dp, b.config.dp * 8))
            )

    def _on_engine_changed(self) -> None:
        self.address.setEnabled(self.engine_combo.currentData() == "ray")

    # ---------------------------------------------------------------- running
    def engine(self) -> Engine:
        jobs = self.workers.value()
        if self.engine_combo.currentData() == "ray":
            address = self.address.text().strip() or None
            if self.ray_engine is None or (self.ray_engine.address, self.ray_engine.jobs) != (address, jobs):
                if self.ray_engine is not None:
                    self.ray_engine.close()
                self.ray_engine = RayEngine(address, jobs)  # kept: Ray starts once per session
            return self.ray_engine
        return LocalEngine(jobs)

    def run(self) -> bool:
        """Start the sweep the fields describe (False, with the reason shown, when it cannot)."""
        if self.task is not None or self.runner.loaded is None or self.runner.baseline is None:
            return False
        cache = self.runner.cache
        assert cache is not None
        try:
            grid = self.current_grid()
            engine = self.engine()
        except LumosError as exc:
            self._show_error(str(exc))
            return False
        self.grid = grid
        self.keys = [GridRow(c, 0, "").key for c in grid.points()]
        self.rows = {}
        self.report = None
        self.selected = None
        self.last_error = ""
        self._fill_view_controls(grid)
        self._refresh()
        job, baseline, relay = self.runner.loaded.job, self.runner.baseline, self._relay
        self._token += 1
        token = self._token

        def work(progress, _on_file):  # type: ignore[no-untyped-def]
            graph = cache.get(scaled(progress, 0.0, 0.0))
            return run_grid(
                job,
                grid,
                engine,
                baseline=baseline,
                graph=graph,
                progress=progress,
                on_row=lambda row: relay.row.emit(token, row),
            )

        task = BackgroundTask(work, token)
        task.progressed.connect(self._on_progress)
        task.succeeded.connect(self._on_succeeded)
        task.failed.connect(lambda _t, msg: self._show_error(f"The sweep failed: {msg}"))
        task.cancelled.connect(self._on_cancelled)
        task.finished.connect(self._on_finished)
        self.task = task
        self._started_at = time.monotonic()
        self._set_running(True)
        self.status.setText(f"{grid.size} configurations on the {engine.name} engine…")
        task.start()
        return True

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    @property
    def running(self) -> bool:
        return self.task is not None

    def shutdown(self) -> None:
        """Stop the sweep (its workers too) and Ray if this dialog started it."""
        if self.task is not None:
            self.task.cancel()
            self.task.wait()
            self.task = None
        if self.ray_engine is not None:
            self.ray_engine.close()
            self.ray_engine = None

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running and self.runner.baseline is not None)
        self.cancel_button.setEnabled(running)
        self.progress.setVisible(running)
        if not running:
            self.progress.setValue(0)

    def _on_progress(self, token: int, fraction: float, message: str) -> None:
        if token != self._token:
            return
        self.progress.setValue(int(1000 * fraction))
        elapsed = time.monotonic() - self._started_at
        eta = f" · about {elapsed * (1 - fraction) / fraction:.0f} s left" if 0.02 < fraction < 1 else ""
        self.status.setText(f"{html.escape(message)} · {fraction * 100:.0f} %{eta}")

    def _on_row(self, token: int, row: GridRow) -> None:
        if token != self._token:
            return
        self.rows[row.key] = row
        if not self._refresh_timer.isActive():
            self._refresh_timer.start()

    def _on_succeeded(self, token: int, report: SweepReport) -> None:
        if token != self._token:
            return
        self.report = report
        self.rows = {r.key: r for r in report.rows}
        ok = sum(r.ok for r in report.rows)
        self.status.setText(
            f"{len(report.rows)} configurations in {report.seconds:.1f} s ({report.engine} engine, "
            f"{report.workers} workers): {ok} estimated, {len(report.rows) - ok} skipped (see the problem column)."
        )
        self._refresh()

    def _on_cancelled(self, token: int) -> None:
        if token == self._token:
            self.status.setText(f"Cancelled: {len(self.rows)} of {len(self.keys)} configurations done.")

    def _on_finished(self, token: int) -> None:
        task = self.task
        if task is None or task.token != token:
            return
        task.wait()
        task.deleteLater()
        self.task = None
        self._set_running(False)
        self._refresh()

    def _show_error(self, message: str) -> None:
        self.last_error = message
        self.status.setText(f"<span style='color:#B42318'>{html.escape(message)}</span>")

    # ---------------------------------------------------------------- views
    def _fill_view_controls(self, grid: Grid) -> None:
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
        self._refresh()

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
            key = GridRow({**grid.fixed, **held, x: value}, 0, "").key
            if key in self.rows:
                out.append(self.rows[key])
        return out

    def _refresh(self) -> None:
        mode = self.view_combo.currentData()
        self.charts.setCurrentWidget(self.pareto if mode == PARETO else self.knob_chart)
        for w in (self.x_label, self.x_combo, self.slice_label, self.slice_combo):
            w.setVisible(mode == VS_KNOB)
        self.shown = [self.rows[k] for k in self.keys if k in self.rows]
        self.table.set_rows(self.shown)
        if mode == PARETO:
            self._pareto_rows = self.shown
            sel = next((i for i, r in enumerate(self.shown) if r.key == self.selected), None)
            self.pareto.set_rows(self.shown, sel)
            n = len(self.pareto.front)
            self.chart_note.setText(
                f"{n} configuration(s) on the Pareto front (red): no other is as fast with as few GPUs."
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
            self.knob_chart.set_points(x, [_as_point(x, r) for r in rows])
        self._show_selection()

    def _on_knob_chart_clicked(self, ev: Any) -> None:
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
        self._show_selection()

    def _show_selection(self) -> None:
        row = self.rows.get(self.selected or "")
        self.scenario_button.setEnabled(row is not None and row.ok)
        self.save_button.setEnabled(bool(self.rows) and self.task is None)
        if row is None:
            self.picked.setText("Pick a configuration in the chart or the table.")
        elif row.ok:
            self.picked.setText(
                f"<b>{html.escape(row.key)}</b>: {row.iteration_us / 1000:.3f} ms on {row.world_size} GPUs "
                f"({row.change_pct:+.1f} % vs the replayed baseline)"
            )
        else:
            self.picked.setText(f"<b>{html.escape(row.key)}</b>: skipped — {html.escape(row.note)}")

    def make_scenario(self) -> bool:
        row = self.rows.get(self.selected or "")
        if row is None or not row.ok:
            return False
        base = self.runner.baseline.config if self.runner.baseline is not None else None
        # values equal to the traced ones are no change (the scenario is named and found by its changes)
        changes = {k: v for k, v in row.changes.items() if base is None or getattr(base, k) != v}
        self.scenario_requested.emit(changes)
        return True

    # ---------------------------------------------------------------- save, theme
    def ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the sweep's rows", "sweep.csv", "CSV (*.csv)")
        if path:
            self.save_csv(path)

    def save_csv(self, path: str) -> None:
        """The rows as ``lumos sweep --out`` writes them (so the CLI can resume from the file)."""
        if self.grid is None:
            return
        with ResultsFile(path, self.grid.columns, restart=True) as out:
            for row in self.shown:
                out.append(row)

    def apply_theme(self, theme: Theme) -> None:
        self.knob_chart.apply_theme(theme)
        self.pareto.apply_theme(theme)
        self._refresh()


def _as_point(knob: str, row: GridRow) -> SweepPoint:
    """A grid row as a point of the one-knob sweep chart (which this dialog reuses)."""
    return SweepPoint(
        knob,
        row.changes.get(knob),
        row.world_size,
        row.iteration_us if row.ok else math.nan,
        row.breakdown,
        row.change_pct,
        "" if row.ok else row.note,
    )


def _add_to_panel_buttons(panel: QWidget, button: QPushButton) -> None:
    """Put ``button`` on its own line under the What-if panel's Estimate / Replay / Reset buttons (in
    their row it would widen the dock, and with it shrink the timeline)."""
    reset = getattr(panel, "reset_button", None)
    row = QHBoxLayout()
    row.addWidget(button)
    row.addStretch(1)
    for lay in panel.findChildren(QHBoxLayout):
        outer = lay.parent()
        if reset is not None and lay.indexOf(reset) >= 0 and isinstance(outer, QVBoxLayout):
            outer.insertLayout(outer.indexOf(lay) + 1, row)
            return
    layout = panel.layout()
    assert isinstance(layout, QVBoxLayout)
    layout.addLayout(row)
