"""The Sweep dialog: a grid over the What-if panel's knobs, estimated in the background by the same
engines as ``lumos sweep`` (a local process pool, or Ray), drawn as it fills in.

Type values for any knobs (``8, 16, 32`` or ``8-512`` for powers of two); the other knobs keep the
What-if panel's values (or the traced ones). Each configuration is :func:`lumos_core.sweep.point.
estimate_point`, so a point's numbers are those of ``lumos estimate``. Invalid combinations become
skipped rows with the reason. Two views (:mod:`app.sweep.grid_views`, a part the dialog owns): iteration time and breakdown
against one swept knob, or a Pareto view of time against GPUs. Pick a point (table or chart) and
*Make scenario* asks (``scenario_requested``) for it to be estimated with its timeline, as the panel
would.

The dialog works with the what-if runner (the open job, its baseline and graph cache) and the
What-if panel (the held changes; it offers the dialog's button). The local engine starts its worker
processes with forkserver (the GUI has threads, and forking a threaded process can deadlock); the
loaded job and graph are sent to each worker once.
"""

from __future__ import annotations

import html
import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDialog, QLabel, QPushButton, QVBoxLayout, QWidget

from app.jobs import BackgroundTask
from app.sweep.engine_bar import EngineBar
from app.sweep.grid_form import KnobGridForm
from app.sweep.grid_views import GridViews
from app.sweep.sources import HeldChanges, SweepEngine
from app.sweep.sweep_csv import ask_sweep_csv, save_sweep_rows
from app.theme import Theme
from app.timeline.state import Forward
from lumos_core.api.knobs import format_changes
from lumos_core.api.sweep import Grid, GridRow, SweepReport, parse_grid, point_key, run_grid
from lumos_core.errors import LumosError
from lumos_core.progress import scaled

_REFRESH_MS = 150  # rows arrive quickly: redraw at most this often


class _RowRelay(QObject):
    """Carries rows from the sweep's worker thread to the GUI thread (queued signal)."""

    row = Signal(int, object)  # token, GridRow


class GridSweepDialog(QDialog):
    """See the module docstring. :meth:`shutdown` before it goes away."""

    scenario_requested = Signal(dict)  # changes
    # the rows live with the views part that draws them (the dialog writes grid, rows and keys)
    grid = Forward("views")
    rows = Forward("views")
    keys = Forward("views")
    shown = Forward("views")
    selected = Forward("views")
    refresh_views = Forward("views")
    slice_rows = Forward("views")
    select = Forward("views")

    def __init__(
        self, runner: SweepEngine, panel: HeldChanges, theme: Theme, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Sweep")
        self.setModal(False)
        self.resize(1100, 800)
        self.runner = runner
        self.panel = panel
        self.views = GridViews(theme)
        self.views.scenario_wanted.connect(self.make_scenario)
        self.views.save_wanted.connect(self.ask_save)
        self.views.gpu_bound_wanted.connect(self.sweep_gpu_bound)
        v = self.views
        self.view_combo, self.x_combo, self.slice_combo = v.view_combo, v.x_combo, v.slice_combo
        self.charts, self.knob_chart, self.pareto = v.charts, v.knob_chart, v.pareto
        self.table, self.picked, self.cpu_banner = v.table, v.picked, v.cpu_banner
        self.chart_note, self.scenario_button, self.save_button = (
            v.chart_note,
            v.scenario_button,
            v.save_button,
        )
        self.report: SweepReport | None = None
        self.task: BackgroundTask | None = None
        self.last_error = ""
        self._token = 0
        self._started_at = 0.0
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(_REFRESH_MS)
        self._refresh_timer.timeout.connect(self.refresh_views)

        self.form = KnobGridForm()
        self.form.submitted.connect(self.run)
        self.form.edited.connect(self._on_grid_edited)
        self.editors, self.traced = self.form.editors, self.form.traced
        self.grid_label = QLabel()
        self.grid_label.setWordWrap(True)
        self.engines = EngineBar()
        self.engines.run_button.clicked.connect(self.run)
        self.engines.cancel_button.clicked.connect(self.cancel)
        e = self.engines
        self.engine_combo, self.workers, self.address = e.engine_combo, e.workers, e.address
        self.run_button, self.cancel_button = e.run_button, e.cancel_button
        self.progress, self.status = e.progress, e.status
        lay = QVBoxLayout(self)
        lay.addWidget(self.form)
        lay.addWidget(self.grid_label)
        lay.addLayout(e.engine_row)
        lay.addLayout(e.progress_row)
        lay.addWidget(self.views, 1)

        # ways in: the What-if panel's button and a menu entry (the workbench puts it in a menu)
        self.open_action = QAction("S&weep Grid…", parent or self)
        self.open_action.setShortcut(QKeySequence("Ctrl+Shift+W"))
        self.open_action.triggered.connect(self.open_dialog)
        self.panel_button = QPushButton("Sweep these knobs…")
        self.panel_button.setToolTip("Sweep a grid of these knobs in the background (time vs knob, Pareto)")
        self.panel_button.clicked.connect(self.open_dialog)
        panel.add_action(self.panel_button)
        self.runner.baseline_changed.connect(self._on_baseline_changed)
        self._on_baseline_changed()
        self.engines.set_running(False, self.runner.baseline is not None)

    # ---------------------------------------------------------------- grid
    def open_dialog(self) -> None:
        self._on_grid_edited()
        self.show()
        self.raise_()
        self.activateWindow()

    def set_grid_text(self, values: dict[str, str]) -> None:
        """Fill the knob fields (``{"dp": "8, 16"}``); the others are cleared."""
        self.form.set_texts(values)

    def held_changes(self) -> dict[str, Any]:
        """The What-if panel's changes, held for every configuration (swept knobs left out)."""
        try:
            changes = self.panel.changes()
        except LumosError:
            return {}
        swept = self.form.swept()
        return {k: v for k, v in changes.items() if k not in swept}

    def current_grid(self) -> Grid:
        """The grid the fields describe (raises LumosError with what is wrong)."""
        text = " ".join(f"{k}={v}" for k, v in self.form.swept().items())
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
        self.form.show_baseline(b)
        self.run_button.setEnabled(b is not None and self.task is None)

    # ---------------------------------------------------------------- running
    def run(self) -> bool:
        """Start the sweep the fields describe (False, with the reason shown, when it cannot)."""
        if self.task is not None or self.runner.loaded is None or self.runner.baseline is None:
            return False
        cache = self.runner.cache
        assert cache is not None
        try:
            grid = self.current_grid()
            engine = self.engines.engine()
        except LumosError as exc:
            self._show_error(str(exc))
            return False
        self.report = None
        self.last_error = ""
        self.views.start(grid, [point_key(c) for c in grid.points()])
        job, baseline = self.runner.loaded.job, self.runner.baseline
        # the worker emits through this relay: owned by the run (the closure below), not by the
        # dialog, so the dialog going away can never delete it under the worker thread
        relay = _RowRelay()
        relay.row.connect(self._on_row)
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
        self.views.running = True
        self._started_at = time.monotonic()
        self.engines.set_running(True, True)
        self.status.setText(f"{grid.size} configurations on the {engine.name} engine…")
        task.start()
        return True

    def sweep_gpu_bound(self, changes: dict[str, Any]) -> bool:
        """The one-click "assume GPU-bound": the same grid with the host time scaled, run again."""
        for knob, value in changes.items():
            if knob in self.editors:
                self.editors[knob].setText(str(value))
        self._on_grid_edited()
        return self.run()

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
            self.views.running = False
        self.engines.close()

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
        self.refresh_views()

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
        self.views.running = False
        self.engines.set_running(False, self.runner.baseline is not None)
        self.refresh_views()

    def _show_error(self, message: str) -> None:
        self.last_error = message
        self.status.setText(f"<span style='color:#B42318'>{html.escape(message)}</span>")

    # ---------------------------------------------------------------- scenario, save, theme
    def make_scenario(self) -> bool:
        row = self.rows.get(self.selected or "")
        if row is None or not row.ok:
            return False
        base = self.runner.baseline.config if self.runner.baseline is not None else None
        # values equal to the traced ones are no change (the scenario is named and found by its changes)
        changes = {k: v for k, v in row.changes.items() if base is None or getattr(base, k) != v}
        self.scenario_requested.emit(changes)
        return True

    def ask_save(self) -> None:
        if path := ask_sweep_csv(self):
            self.save_csv(path)

    def save_csv(self, path: str) -> None:
        """The rows as ``lumos sweep --out`` writes them (so the CLI can resume from the file)."""
        if self.grid is None:
            return
        save_sweep_rows(path, self.grid.columns, self.shown)

    def apply_theme(self, theme: Theme) -> None:
        self.views.apply_theme(theme)

    def _on_knob_chart_clicked(self, ev: Any) -> None:  # the tests click the chart through this
        self.views.knob_chart_clicked(ev)
