"""The what-if workflow of the main window: configuration panel, background runs, scenarios,
overlay, comparison, sweep, sessions and exports, wired together.

:class:`WhatIfWorkbench` is created by the main window and owns the widgets of part 2: the
What-if and Scenarios docks, the Prediction tab of the summary dock, the Compare and Sweep tabs of
the central area, and a :class:`~app.whatif.runner.WhatIfRunner`. When a job opens the baseline replay
starts in the background; every finished run becomes a scenario and the newest one the user asked
for is drawn over the measured timeline.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QDockWidget, QFileDialog, QLabel, QMenu, QToolBar

from app.jobs import BackgroundTask
from app.loaded_job import LoadedJob
from app.panels.details_panel import EventDetails, describe_event
from app.sweep.sweep_dialog import GridSweepDialog
from app.sweep.sweep_view import SweepView
from app.theme import Theme
from app.timeline.timeline_view import OVERLAY_MODES, PREDICTED, Hit
from app.whatif.compare_view import CompareView
from app.whatif.config_panel import ConfigPanel
from app.whatif.prediction_details import describe_predicted, describe_rebuilt, describe_with_prediction
from app.whatif.prediction_pane import PredictionPane
from app.whatif.runner import BASELINE_NAME, Request, Scenario, SweepOutcome, WhatIfRunner
from app.whatif.scenarios import ScenarioList
from lumos_core.errors import LumosError
from lumos_core.replay.summaries import write_csv
from lumos_core.whatif.export import default_out_name, write_job
from lumos_core.whatif.session import SUFFIX, ScenarioSpec, Session, load_session, save_session

if TYPE_CHECKING:
    from app.main_window import MainWindow

MEASURED_ONLY = "measured"


class WhatIfWorkbench(QObject):
    """See the module docstring."""

    scenario_added = Signal(object)  # Scenario
    scenario_shown = Signal(object)  # Scenario or None
    run_failed = Signal(str)
    idle = Signal()
    exported = Signal(str)  # folder written
    session_restored = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.loaded: LoadedJob | None = None
        self.is_demo = False
        self.scenarios: dict[int, Scenario] = {}
        self.shown: Scenario | None = None
        self.baseline_us: float | None = None
        self.last_error = ""
        self.last_notice = ""
        self.timings: dict[str, float] = {}
        self._mode_chosen = False
        self.auto_replay = True  # replay the traced configuration when a job opens
        self._pending_session: Session | None = None
        self._restoring: Session | None = None
        self._export_tasks: dict[int, BackgroundTask] = {}
        self._export_token = 0

        self.runner = WhatIfRunner(self)
        self.panel = ConfigPanel()
        self.scenario_list = ScenarioList()
        self.prediction = PredictionPane(window.theme)
        self.compare = CompareView(window.theme)
        self.sweep = SweepView(window.theme)

        self.config_dock = QDockWidget("What-if", window)
        self.config_dock.setObjectName("WhatIfDock")
        self.config_dock.setWidget(self.panel)
        self.scenario_dock = QDockWidget("Scenarios", window)
        self.scenario_dock.setObjectName("ScenariosDock")
        self.scenario_dock.setWidget(self.scenario_list)
        window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.config_dock)
        window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.scenario_dock)
        window.splitDockWidget(self.config_dock, self.scenario_dock, Qt.Orientation.Vertical)
        window.summaries.insertTab(1, self.prediction, "Prediction")  # after Iterations

        self.mode_combo = QComboBox()
        self.mode_combo.addItem("Overlay: off (measured only)", MEASURED_ONLY)
        for key, text in OVERLAY_MODES.items():
            self.mode_combo.addItem(f"Overlay: {text}", key)
        # shown (not chosen) when the estimator rebuilt the ranks: they cannot share rows
        self.mode_combo.addItem("Overlay: predicted ranks on their own (rebuilt job)", "separate")
        self.mode_combo.setToolTip("How the selected scenario's predicted timeline is drawn")
        self.mode_combo.activated.connect(self._on_mode_chosen)
        self.overlay_note = QLabel()  # under the legend (the main window places it)
        self.overlay_note.setContentsMargins(8, 2, 8, 3)
        self.overlay_note.setWordWrap(True)
        self.overlay_note.hide()
        # what-if news in its own corner of the status bar: it never covers the window's status
        self.status = QLabel()
        self.status.setContentsMargins(8, 0, 8, 0)
        window.statusBar().addPermanentWidget(self.status)
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(lambda: self.status.setText(""))
        self._summary_timer = QTimer(self)
        self._summary_timer.setSingleShot(True)
        self._summary_timer.setInterval(0)
        self._summary_timer.timeout.connect(self._show_summary)

        r = self.runner
        r.started.connect(self._on_started)
        r.progressed.connect(self.panel.set_progress)
        r.scenario_ready.connect(self._on_scenario)
        r.sweep_ready.connect(self._on_sweep)
        r.failed.connect(self._on_failed)
        r.cancelled.connect(self._on_cancelled)
        r.idle.connect(self._on_idle)
        r.baseline_changed.connect(self._on_baseline_changed)
        p = self.panel
        p.estimate_requested.connect(lambda changes, name: self.request_estimate(changes, name or None))
        p.replay_requested.connect(self.request_replay)
        p.overrides_changed.connect(self.runner.set_overrides)
        p.cancel_requested.connect(self.runner.cancel)
        sl = self.scenario_list
        sl.shown.connect(self.show_scenario)
        sl.compare_requested.connect(self.compare_pair)
        sl.remove_requested.connect(self.remove_scenario)
        sl.renamed.connect(self.rename_scenario)
        sl.export_timeline_requested.connect(self.ask_export_timeline)
        sl.export_tables_requested.connect(self.ask_export_tables)
        self.sweep.sweep_requested.connect(self.request_sweep)
        self.sweep.keep_requested.connect(lambda knob, value: self.request_estimate({knob: value}))
        self.grid_sweep = GridSweepDialog(self)  # wires itself: panel button, Make scenario, baseline
        self._on_baseline_changed()

    # ---------------------------------------------------------------- window integration
    def install_toolbar(self, tb: QToolBar) -> None:
        tb.addSeparator()
        tb.addWidget(self.mode_combo)

    def install_file_menu(self, file_menu: QMenu) -> None:
        """Session and scenario export entries (appended where the window calls this)."""
        w = self.window
        file_menu.addSeparator()
        for text, slot, key in (
            ("Open &Session…", self.ask_open_session, None),
            ("Sa&ve Session…", self.ask_save_session, QKeySequence.StandardKey.Save),
        ):
            a = QAction(text, w)
            if key is not None:
                a.setShortcut(QKeySequence(key))
            a.triggered.connect(lambda _c=False, f=slot: f())
            file_menu.addAction(a)
        exp = file_menu.addMenu("Export Scenario")
        exp.addAction(
            "Predicted Timeline (Kineto/Perfetto JSON)…", lambda: self.ask_export_timeline(self._shown_id())
        )
        exp.addAction("Tables (CSV)…", lambda: self.ask_export_tables(self._shown_id()))

    def install_menus(self, view_menu: QMenu, run_menu: QMenu) -> None:
        w = self.window
        view_menu.addSeparator()
        view_menu.addAction(self.config_dock.toggleViewAction())
        view_menu.addAction(self.scenario_dock.toggleViewAction())
        est = QAction("&Estimate", w)
        est.setShortcut(QKeySequence("Ctrl+E"))
        est.triggered.connect(self.panel.request_estimate)
        run_menu.addAction(est)
        rep = QAction("&Replay Baseline", w)
        rep.setShortcut(QKeySequence("Ctrl+R"))
        rep.triggered.connect(self.request_replay)
        run_menu.addAction(rep)
        cancel = QAction("&Cancel Run", w)
        cancel.setShortcut(QKeySequence("Ctrl+."))
        cancel.triggered.connect(self.runner.cancel)
        run_menu.addAction(cancel)
        run_menu.addAction(self.grid_sweep.open_action)
        run_menu.addSeparator()
        for label, tab in (
            ("Show &Timeline", None),
            ("Show &Compare", self.compare),
            ("Show S&weep", self.sweep),
        ):
            a = QAction(label, w)
            a.triggered.connect(
                lambda _c=False, t=tab: self.window.workspace.setCurrentWidget(t or self.window.timeline_page)
            )
            run_menu.addAction(a)

    def set_job(self, loaded: LoadedJob | None, demo: bool = False) -> None:
        """A new job: forget every scenario, start the baseline replay (or a reopened session)."""
        session, self._pending_session = self._pending_session, None
        self.loaded = loaded
        self.is_demo = demo
        self.scenarios = {}
        self.shown = None
        self.baseline_us = None
        self.last_error = ""
        self.scenario_list.clear()
        self.compare.set_job(loaded)
        self.prediction.show_summary(None)
        self.panel.show_error("")
        self.runner.set_job(loaded, session.baseline_overrides if session else None)
        self.window.timeline.set_prediction(None)
        self._update_shown_label()
        if loaded is None:
            return
        if loaded.baseline is None and self.runner.baseline is None:
            self.panel.show_error(loaded.baseline_error)
            return
        if session is not None:
            self._restore_scenarios(session)
        elif self.auto_replay:
            self.runner.enqueue(Request("replay", auto=True))

    def shutdown(self) -> None:
        self.runner.shutdown()
        self.grid_sweep.shutdown()
        for task in self._export_tasks.values():
            task.cancel()
        for task in list(self._export_tasks.values()):
            task.wait()
        self._export_tasks.clear()

    def apply_theme(self, theme: Theme) -> None:
        self.overlay_note.setStyleSheet(f"background: {theme.background}; color: {theme.foreground};")
        self.prediction.apply_theme(theme)
        self.compare.apply_theme(theme)
        self.sweep.apply_theme(theme)
        self.grid_sweep.apply_theme(theme)

    def notify(self, text: str, timeout_ms: int = 5000) -> None:
        """A passing message in the status bar (it never replaces the window's own status text,
        e.g. a measured span, which comes back when the message goes)."""
        self.last_notice = text
        metrics = self.status.fontMetrics()
        self.status.setText(metrics.elidedText(text, Qt.TextElideMode.ElideRight, 520))
        self.status.setToolTip(text)
        self._notice_timer.start(timeout_ms)

    # ---------------------------------------------------------------- requests
    def request_replay(self) -> bool:
        return self.runner.request(Request("replay", name=BASELINE_NAME))

    def request_estimate(self, changes: dict[str, Any], name: str | None = None) -> bool:
        """Estimate ``changes`` (superseding any run). The same changes estimated before with the
        same baseline are shown again instead of recomputed."""
        existing = self._find(changes)
        if existing is not None and not name:
            self.show_scenario(existing.id)
            self.notify(f"{existing.name}: already computed (shown).")
            return True
        return self.runner.request(Request("estimate", dict(changes), name or None))

    def enqueue_estimate(self, changes: dict[str, Any], name: str | None = None) -> bool:
        return self.runner.enqueue(Request("estimate", dict(changes), name or None))

    def request_sweep(self, knob: str, values: list[Any]) -> bool:
        return self.runner.request(Request("sweep", {}, knob=knob, values=list(values)))

    def _find(self, changes: dict[str, Any]) -> Scenario | None:
        for s in self.scenarios.values():
            if s.kind == "estimate" and s.changes == changes and s.overrides == self.runner.overrides:
                return s
        return None

    # ---------------------------------------------------------------- runner news
    def _on_started(self, req: Request) -> None:
        self.panel.set_running(True, req.label)
        self.notify(f"What-if: {req.label}…")

    def _on_scenario(self, s: Scenario) -> None:
        t0 = time.perf_counter()
        names = {x.name for x in self.scenarios.values()}
        if s.summary.name in names:
            k = 2
            while f"{s.summary.name} ({k})" in names:
                k += 1
            s.summary.name = f"{s.summary.name} ({k})"
        self.scenarios[s.id] = s
        if s.kind == "replay" and self.baseline_us is None:
            self.baseline_us = s.summary.iteration_us
            self.scenario_list.add(s, self.baseline_us)
            self.scenario_list.refresh(list(self.scenarios.values()), self.baseline_us)
        else:
            self.scenario_list.add(s, self.baseline_us)
        self.compare.set_scenarios(list(self.scenarios.values()))
        running = self.runner.running  # the request that produced ``s``
        auto = running is not None and running.auto
        # the automatic baseline replay never replaces what the user asked to see
        if self._restoring is None and (self.shown is None or not auto):
            self.show_scenario(s.id)
        self.timings["last_run_s"] = s.seconds
        self.timings["last_show_s"] = time.perf_counter() - t0
        self.notify(f"What-if: {s.name} ready in {s.seconds:.2f} s.")
        self.scenario_added.emit(s)

    def _on_sweep(self, outcome: SweepOutcome) -> None:
        self.sweep.show_outcome(outcome)
        self.window.workspace.setCurrentWidget(self.sweep)

    def _on_failed(self, req: Request, message: str) -> None:
        self.last_error = f"{req.label}: {message}"
        self.panel.show_error(f"Could not finish {req.label}: {message}")
        if req.kind == "sweep":
            self.sweep.show_message(f"The sweep failed: {message}")
        self.notify(f"What-if failed: {message}", 15_000)
        self.run_failed.emit(message)

    def _on_cancelled(self, req: Request) -> None:
        self.notify(f"What-if cancelled ({req.label}).")
        self.panel.set_running(False, "Cancelled.")

    def _on_idle(self) -> None:
        self.panel.set_running(False, self.panel.run_label.text() if self.last_error else "")
        if self._restoring is not None:
            session, self._restoring = self._restoring, None
            self._apply_view(session)
            self.session_restored.emit()
        self.idle.emit()

    def _on_baseline_changed(self) -> None:
        b = self.runner.baseline
        self.panel.set_baseline(b, self.runner.baseline_error)
        self.sweep.set_baseline(b)

    # ---------------------------------------------------------------- scenarios
    def show_scenario(self, scenario_id: int | None) -> None:
        """Draw a scenario over the measured timeline and show its numbers (None: measured only)."""
        s = self.scenarios.get(scenario_id) if scenario_id is not None else None
        self.shown = s
        tl = self.window.timeline
        if s is None:
            tl.set_prediction(None)
            self._summary_timer.stop()
            self.prediction.show_summary(None)
        else:
            mode = tl.overlay_mode
            if not self._mode_chosen:
                # a replay of the traced ranks reads best as a ghost; a what-if as its own rows
                mode = "ghost" if s.kind == "replay" else "paired"
            tl.set_prediction(s.overlay, mode)
            # the tables next event-loop turn: drawing the overlay and sizing the table columns
            # (tens of ms each on a busy machine) then never add up to one long stall
            self._summary_timer.start()
            self.scenario_list.select(s.id)
            self.panel.set_changes(s.changes)
            self.window.summaries.setCurrentWidget(self.prediction)
        self._sync_mode_combo()
        self._update_shown_label()
        self.scenario_shown.emit(s)

    def _show_summary(self) -> None:
        self.prediction.show_summary(self.shown.summary if self.shown is not None else None)

    def _shown_id(self) -> int:
        return self.shown.id if self.shown is not None else -1

    def _on_mode_chosen(self, _index: int) -> None:
        mode = self.mode_combo.currentData()
        if mode == "separate":
            if self.shown is not None and self.shown.overlay.separate:
                self.window.timeline.set_prediction(self.shown.overlay)
            self._sync_mode_combo()
            return
        self._mode_chosen = True
        if mode == MEASURED_ONLY:
            self.window.timeline.set_prediction(None)
        elif self.shown is not None:
            self.window.timeline.set_prediction(self.shown.overlay, mode)
        else:
            self.window.timeline.overlay_mode = mode
        self._update_shown_label()

    def set_overlay_mode(self, mode: str) -> None:
        i = self.mode_combo.findData(mode)
        if i >= 0:
            self.mode_combo.setCurrentIndex(i)
            self._on_mode_chosen(i)

    def _sync_mode_combo(self) -> None:
        i = self.mode_combo.findData(self.window.timeline.shown_mode)
        self.mode_combo.setCurrentIndex(max(i, 0))

    def _update_shown_label(self) -> None:
        """The line under the legend: which scenario is drawn, how, and its headline number."""
        s = self.shown
        mode = self.window.timeline.shown_mode
        if s is None or mode == "measured":
            self.overlay_note.setText("")
            self.overlay_note.hide()
            return
        sm = s.summary
        tail = (
            f"replay error {sm.replay_error_pct:.2f} %"
            if sm.kind == "replay"
            else f"{sm.change_pct:+.1f} % vs the replayed baseline"
        )
        how = {
            "ghost": "filled: measured · <b>outlined: predicted</b>",
            "paired": "each measured row is followed by its <b>↳ predicted</b> row",
            "predicted": "predicted ranks only",
            "separate": "the predicted job's ranks (rebuilt by the estimator), then the measured ranks for reference",
        }[mode]
        self.overlay_note.setText(
            f"Overlay: <b>{html.escape(s.name)}</b> — {sm.iteration_us / 1000:.2f} ms per iteration "
            f"({tail}) — {how}"
        )
        self.overlay_note.show()

    def remove_scenario(self, scenario_id: int) -> None:
        s = self.scenarios.pop(scenario_id, None)
        if s is None:
            return
        self.scenario_list.remove(scenario_id)
        self.compare.set_scenarios(list(self.scenarios.values()))
        if self.shown is s:
            self.show_scenario(None)

    def rename_scenario(self, scenario_id: int, name: str) -> None:
        s = self.scenarios.get(scenario_id)
        if s is None or not name:
            return
        s.summary.name = name
        self.scenario_list.refresh(list(self.scenarios.values()), self.baseline_us)
        self.compare.set_scenarios(list(self.scenarios.values()))
        self._update_shown_label()
        if self.shown is s:
            self.prediction.show_summary(s.summary)

    def compare_pair(self, a: int, b: int) -> None:
        self.compare.set_scenarios(list(self.scenarios.values()))
        self.compare.show_pair(a, b)
        self.window.workspace.setCurrentWidget(self.compare)

    def scenario_named(self, name: str) -> Scenario | None:
        return next((s for s in self.scenarios.values() if s.name == name), None)

    def describe_hit(self, hit: Hit) -> EventDetails:
        """Details of a task, with the shown scenario's prediction for it (and why)."""
        assert self.loaded is not None
        tl = self.window.timeline
        s = self.shown if tl.prediction is not None else None
        if s is not None and s.overlay.separate:  # ranks built anew: no task-by-task counterpart
            if hit.layer == PREDICTED:
                return describe_rebuilt(s, tl.predicted_index(hit), hit.event)
            return describe_event(self.loaded, hit.rank_index, hit.event)
        if hit.layer == PREDICTED and s is not None:
            return describe_predicted(self.loaded, s, hit.rank_index, hit.event)
        if s is not None:
            return describe_with_prediction(self.loaded, s, hit.rank_index, hit.event)
        return describe_event(self.loaded, hit.rank_index, hit.event)

    # ---------------------------------------------------------------- export
    def ask_export_timeline(self, scenario_id: int) -> None:
        s = self.scenarios.get(scenario_id)
        if s is None:
            return
        folder = QFileDialog.getExistingDirectory(
            self.window, f"Export the predicted timeline of {s.name} into"
        )
        if folder:
            self.export_timeline(scenario_id, default_out_name(Path(folder), s.name))

    def export_timeline(self, scenario_id: int, out: str | Path) -> int:
        """Write the scenario's predicted ranks as Kineto JSON, one file per rank of the predicted
        job (as ``lumos estimate --out``), in the background; ``exported`` tells when done."""
        s = self.scenarios[scenario_id]
        result = s.result
        extra = {"lumos_scenario": s.name, "lumos_estimate_config": s.summary.config.as_dict()}
        represents = s.summary.represents
        timeline = result.timeline
        world = s.summary.world_size
        out = Path(out)

        def work(progress, _on_file):  # type: ignore[no-untyped-def]
            return write_job(timeline, represents, out, world, extra=extra, progress=progress)

        self._export_token += 1
        token = self._export_token
        task = BackgroundTask(work, token)
        task.succeeded.connect(lambda _t, files: self._on_exported(out, files))
        task.failed.connect(lambda _t, msg: self._on_export_failed(out, msg))
        task.finished.connect(self._on_export_finished)
        self._export_tasks[token] = task
        self.notify(f"Writing {world} predicted rank file(s) to {out}…")
        task.start()
        return token

    def _on_exported(self, out: Path, files: list[Path]) -> None:
        self.notify(f"Wrote {len(files)} predicted rank file(s) to {out}", 10_000)
        self.exported.emit(str(out))

    def _on_export_failed(self, out: Path, message: str) -> None:
        self.last_error = message
        self.notify(f"Could not export to {out}: {message}", 15_000)
        self.run_failed.emit(message)

    def _on_export_finished(self, token: int) -> None:
        task = self._export_tasks.pop(token, None)
        if task is not None:
            task.wait()
            task.deleteLater()

    @property
    def exporting(self) -> bool:
        return bool(self._export_tasks)

    def ask_export_tables(self, scenario_id: int) -> None:
        if scenario_id not in self.scenarios:
            return
        folder = QFileDialog.getExistingDirectory(self.window, "Export the scenario's tables as CSV into")
        if folder:
            written = self.export_tables(scenario_id, folder)
            self.notify(f"Wrote {len(written)} file(s) to {folder}", 10_000)

    def export_tables(self, scenario_id: int, folder: str | Path) -> list[Path]:
        """iterations.csv, breakdown.csv, retimed.csv (estimates) and scenario.json (with, for an
        estimate, exactly what ``lumos estimate --json`` prints)."""
        s = self.scenarios[scenario_id]
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for name, (rows, row_type) in s.summary.tables().items():
            path = folder / f"{name}.csv"
            write_csv(rows, path, row_type)
            out.append(path)
        doc = {"scenario": s.summary.as_dict(), "estimate": s.summary.estimate_json}
        path = folder / "scenario.json"
        path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
        out.append(path)
        return out

    # ---------------------------------------------------------------- sessions
    def session(self) -> Session:
        """The open job and its scenarios, as a session (configurations only, no results)."""
        specs = [ScenarioSpec(s.name, s.kind, dict(s.changes)) for s in self.scenarios.values()]
        view: dict[str, Any] = {"overlay": self.window.timeline.shown_mode}
        if self.shown is not None:
            view["selected"] = self.shown.name
        if self.compare.a is not None and self.compare.b is not None:
            view["compare"] = [self.compare.a.name, self.compare.b.name]
            view["compare_offset_ms"] = self.compare.offset.value()
        path = None if self.is_demo or self.loaded is None else str(Path(self.loaded.path).resolve())
        return Session(path, self.is_demo, dict(self.runner.overrides), specs, view)

    def save_session(self, path: str | Path) -> Path:
        return save_session(self.session(), path)

    def ask_save_session(self) -> None:
        if self.loaded is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self.window, "Save session", f"session{SUFFIX}", f"Lumos sessions (*{SUFFIX} *.json)"
        )
        if path:
            self.save_session(path)
            self.notify(f"Saved the session to {path}", 10_000)

    def ask_open_session(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window, "Open session", str(Path.home()), f"Lumos sessions (*{SUFFIX} *.json);;All files (*)"
        )
        if path:
            self.open_session(path)

    def open_session(self, path: str | Path) -> bool:
        """Open the session's traces, then recompute its scenarios in the background."""
        try:
            session = load_session(path)
        except LumosError as exc:
            self.window.show_error(str(exc))
            return False
        self._pending_session = session
        token = self.window.open_demo() if session.demo else self.window.open_path(session.trace_path or "")
        if token < 0:
            self._pending_session = None
            return False
        return True

    def _restore_scenarios(self, session: Session) -> None:
        self._restoring = session
        for spec in session.scenarios:
            if spec.kind == "replay":
                self.runner.enqueue(Request("replay", name=spec.name))
            else:
                self.runner.enqueue(Request("estimate", dict(spec.changes), spec.name))
        if not self.runner.busy:  # an empty session
            self._on_idle()

    def _apply_view(self, session: Session) -> None:
        view = session.view
        pair = view.get("compare")
        if isinstance(pair, list) and len(pair) == 2:
            a, b = self.scenario_named(str(pair[0])), self.scenario_named(str(pair[1]))
            if a is not None and b is not None:
                self.compare.set_scenarios(list(self.scenarios.values()))
                self.compare.offset.setValue(float(view.get("compare_offset_ms") or 0.0))
                self.compare.show_pair(a.id, b.id)
        selected = self.scenario_named(str(view.get("selected", "")))
        if selected is None and self.scenarios:
            selected = list(self.scenarios.values())[-1]
        mode = view.get("overlay")
        if isinstance(mode, str) and mode in OVERLAY_MODES:
            self.window.timeline.overlay_mode = mode
            self._mode_chosen = True
        if selected is not None:
            self.show_scenario(selected.id)
        if mode == MEASURED_ONLY:
            self.set_overlay_mode(MEASURED_ONLY)
