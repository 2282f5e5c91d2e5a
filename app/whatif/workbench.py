"""The what-if workflow of the main window: configuration panel, background runs, scenarios,
overlay, comparison, sweep, sessions and exports, wired together.

:class:`WhatIfWorkbench` owns the what-if widgets and a :class:`~app.whatif.runner.WhatIfRunner`;
the window places them: the What-if and Scenarios docks (``config_dock``, ``scenario_dock``), the
Prediction tab of the summary dock (``prediction``), the Compare and Sweep tabs of the central area
(``compare``, ``sweep``), the overlay note and the status corner (``overlay_note``, ``status``).
``reveal_requested`` asks the window to bring one of them to the front. When a job opens the
baseline replay starts in the background; every finished run becomes a scenario and the newest one
the user asked for is drawn over the measured timeline.

The workbench owns small parts, each in its own module, and wires their signals: the overlay-mode
choice (:mod:`app.whatif.overlay_choice`), exports (:mod:`app.whatif.scenario_export`), sessions
(:mod:`app.whatif.session_keeping`), the runs it asks for (:mod:`app.whatif.run_requests`) and the
entries it adds to the window's toolbar and menus (:mod:`app.whatif.workbench_menus`). They share one
plain :class:`~app.whatif.workbench_state.WorkbenchState` and never reach into each other; the
workbench's public names forward to the part that owns them (:class:`~app.timeline.state.Forward`).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QWidget

from app.elided_label import ElidedLabel
from app.panels.details_panel import EventDetails, describe_event
from app.sweep.sweep_dialog import GridSweepDialog
from app.sweep.sweep_view import SweepView
from app.theme import Theme
from app.timeline.state import Forward
from app.timeline.timeline_view import PREDICTED, Hit, TimelineView
from app.view_model.loaded_job import LoadedJob
from app.view_model.overlay_data import match_text
from app.whatif.compare_view import CompareView
from app.whatif.config_panel import ConfigPanel
from app.whatif.measured_compare import MeasuredCompare
from app.whatif.overlay_choice import OverlayChoice
from app.whatif.prediction_details import describe_predicted, describe_rebuilt, describe_with_prediction
from app.whatif.prediction_pane import PredictionPane
from app.whatif.run_requests import RunRequests
from app.whatif.runner import Request, Scenario, SweepOutcome, WhatIfRunner
from app.whatif.scenario_export import ScenarioExport
from app.whatif.scenarios import ScenarioList
from app.whatif.session_keeping import JobHost, SessionKeeping
from app.whatif.workbench_menus import WorkbenchMenus
from app.whatif.workbench_state import WorkbenchState
from lumos_core.api.loading import COMPILING

__all__ = ["JobHost", "WhatIfWorkbench"]


class WhatIfWorkbench(QObject):
    """See the module docstring."""

    scenario_added = Signal(object)  # Scenario
    scenario_shown = Signal(object)  # Scenario or None
    run_failed = Signal(str)
    idle = Signal()
    exported = Signal(str)  # folder written
    session_restored = Signal()
    reveal_requested = Signal(object)  # a widget of the workbench to bring to the front; None: the timeline

    # the public face of the parts: each name says which part owns it
    loaded, is_demo, scenarios = Forward("state"), Forward("state"), Forward("state")
    shown, baseline_us, last_error = Forward("state"), Forward("state"), Forward("state")
    scenario_named = Forward("state")
    mode_chosen, mode_combo, overlay_note = Forward("overlay"), Forward("overlay"), Forward("overlay")
    set_overlay_mode = Forward("overlay")
    profile_button, set_hardware_profile = Forward("requests"), Forward("requests")
    request_replay, request_estimate = Forward("requests"), Forward("requests")
    enqueue_estimate, request_sweep = Forward("requests"), Forward("requests")
    request_predict_from, enqueue_predict_from = Forward("requests"), Forward("requests")
    export_timeline, export_tables, exporting = Forward("exports"), Forward("exports"), Forward("exports")
    session, save_session, open_session = Forward("sessions"), Forward("sessions"), Forward("sessions")
    pending_session = Forward("sessions")
    install_toolbar, install_file_menu, install_menus = Forward("menus"), Forward("menus"), Forward("menus")

    def __init__(self, host: JobHost, timeline: TimelineView, theme: Theme, parent: QWidget) -> None:
        super().__init__(parent)
        self.timeline = timeline
        self.state = WorkbenchState()
        self.last_notice = ""
        self.timings: dict[str, float] = {}
        self.auto_replay = True  # replay the traced configuration when a job opens

        self.runner = WhatIfRunner(self)
        self.panel = ConfigPanel()
        self.scenario_list = ScenarioList()
        self.prediction = PredictionPane(theme)
        self.compare = CompareView(theme)
        self.sweep = SweepView(theme)
        self.measured_compare = MeasuredCompare(timeline, parent)
        self.overlay = OverlayChoice(timeline, self.state)
        self.requests = RunRequests(self.runner, self.panel, self.state, parent)
        self.exports = ScenarioExport(self.state, parent)
        self.sessions = SessionKeeping(
            host, self.runner, timeline, self.compare, self.overlay, self.state, parent
        )
        self.config_dock = QDockWidget("What-if")
        self.config_dock.setObjectName("WhatIfDock")
        self.config_dock.setWidget(self.panel)
        self.scenario_dock = QDockWidget("Scenarios")
        self.scenario_dock.setObjectName("ScenariosDock")
        self.scenario_dock.setWidget(self.scenario_list)
        # what-if news in its own corner of the status bar: it never covers the window's status
        self.status = ElidedLabel()
        self.status.setContentsMargins(8, 0, 8, 0)
        self._notice_timer = QTimer(self)
        self._notice_timer.setSingleShot(True)
        self._notice_timer.timeout.connect(lambda: self.status.setText(""))
        self._summary_timer = QTimer(self)
        self._summary_timer.setSingleShot(True)
        self._summary_timer.setInterval(0)
        self._summary_timer.timeout.connect(self._show_summary)
        for part in (self.requests, self.exports, self.sessions):
            part.notice.connect(self.notify)
        for part in (self.requests, self.sessions):
            part.show_requested.connect(self.show_scenario)
        self.exports.exported.connect(self.exported)
        self.exports.failed.connect(self.run_failed)

        r = self.runner
        r.started.connect(self._on_started)
        r.progressed.connect(self.panel.set_progress)
        r.progressed.connect(self._on_run_progress)
        r.scenario_ready.connect(self._on_scenario)
        r.sweep_ready.connect(self._on_sweep)
        r.failed.connect(self._on_failed)
        r.cancelled.connect(self._on_cancelled)
        r.idle.connect(self.settle)
        r.baseline_changed.connect(self._on_baseline_changed)
        p = self.panel
        p.estimate_requested.connect(
            lambda changes, name: self.requests.request_estimate(changes, name or None)
        )
        p.replay_requested.connect(self.requests.request_replay)
        p.overrides_changed.connect(self.runner.set_overrides)
        p.cancel_requested.connect(self.runner.cancel)
        sl = self.scenario_list
        sl.shown.connect(self.show_scenario)
        sl.compare_requested.connect(self.compare_pair)
        sl.remove_requested.connect(self.remove_scenario)
        sl.renamed.connect(self.rename_scenario)
        sl.export_timeline_requested.connect(self.exports.ask_export_timeline)
        sl.export_tables_requested.connect(self.exports.ask_export_tables)
        self.prediction.gpu_bound_requested.connect(lambda changes: self.requests.request_estimate(changes))
        self.sweep.sweep_requested.connect(self.requests.request_sweep)
        self.sweep.keep_requested.connect(lambda knob, value: self.requests.request_estimate({knob: value}))
        # the grid sweep puts its button on the panel; its picks come back as estimates
        self.grid_sweep = GridSweepDialog(self.runner, self.panel, theme, parent)
        self.grid_sweep.scenario_requested.connect(lambda changes: self.requests.request_estimate(changes))
        self.menus = WorkbenchMenus(
            (self.config_dock, self.scenario_dock),
            (self.compare, self.sweep, self.measured_compare),
            (self.runner, self.panel, self.grid_sweep),
            (self.overlay, self.requests, self.exports, self.sessions),
            self.state,
        )
        self.menus.reveal_requested.connect(self.reveal_requested)
        self._on_baseline_changed()

    # ---------------------------------------------------------------- window integration
    def set_job(self, loaded: LoadedJob | None, demo: bool = False) -> None:
        """A new job: forget every scenario, start the baseline replay (or a reopened session)."""
        session = self.sessions.take_pending()
        self.state.reset(loaded, demo)
        self.scenario_list.clear()
        self.compare.set_job(loaded)
        self.measured_compare.set_job(loaded)
        self.prediction.show_summary(None)
        self.panel.show_error("")
        self.runner.set_job(loaded, session.baseline_overrides if session else None)
        self.timeline.set_prediction(None)
        self.overlay.update_shown_label()
        if loaded is None:
            return
        if loaded.baseline is None and self.runner.baseline is None:
            self.panel.show_error(loaded.baseline_error)
            return
        if session is not None:
            if not self.sessions.restore_scenarios(session):  # an empty session
                self.settle()
        elif self.auto_replay:
            self.runner.enqueue(Request("replay", auto=True))

    def shutdown(self) -> None:
        self.runner.shutdown()
        self.measured_compare.shutdown()
        self.grid_sweep.shutdown()
        self.exports.stop()

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
        self.status.setText(text)  # shortened to its room, the whole text in its tooltip
        self._notice_timer.start(timeout_ms)

    def show_waiting(self, text: str) -> None:
        """What the job is waiting for (e.g. "reading 12 of 256 files…"), in the What-if panel and
        the Prediction tab while they have nothing of their own to show."""
        self.panel.show_waiting(text)
        self.prediction.show_waiting(text)

    # ---------------------------------------------------------------- runner news
    def _on_run_progress(self, _fraction: float, message: str) -> None:
        if message == COMPILING:  # a one-off wait of ~15 s: say so where the user looks
            self.notify(f"What-if: {message}…", 30_000)
        running = self.runner.running
        self.prediction.show_waiting(f"Waiting for the {running.label if running else 'engine'}: {message}…")

    def _on_started(self, req: Request) -> None:
        self.panel.set_running(True, req.label)
        self.notify(f"What-if: {req.label}…")

    def _on_scenario(self, s: Scenario) -> None:
        t0 = time.perf_counter()
        s.summary.name = self.state.unique_name(s.summary.name)
        self.scenarios[s.id] = s
        if s.kind == "replay" and self.baseline_us is None:
            self.baseline_us = s.summary.iteration_us
            self.scenario_list.add(s, self.baseline_us)
            self.scenario_list.refresh(self.state.listed(), self.baseline_us)
        else:
            self.scenario_list.add(s, self.baseline_us)
        self.compare.set_scenarios(self.state.listed())
        running = self.runner.running  # the request that produced ``s``
        auto = running is not None and running.auto
        # the automatic baseline replay never replaces what the user asked to see
        if self.sessions.restoring is None and (self.shown is None or not auto):
            self.show_scenario(s.id)
        self.timings["last_run_s"] = s.seconds
        self.timings["last_show_s"] = time.perf_counter() - t0
        match = match_text(s.overlay) if s.kind == "replay" else ""
        if match:  # how well the replay reproduces the trace, in the terms of what is drawn
            self.notify(f"Replay {match}.", 15_000)
        else:
            self.notify(f"What-if: {s.name} ready in {s.seconds:.2f} s.")
        self.scenario_added.emit(s)

    def _on_sweep(self, outcome: SweepOutcome) -> None:
        self.sweep.show_outcome(outcome)
        self.reveal_requested.emit(self.sweep)

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

    def settle(self) -> None:
        """Nothing runs any more: the panel says so, a reopened session gets its view back."""
        self.panel.set_running(False, self.panel.run_label.text() if self.last_error else "")
        if self.sessions.settle():
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
        if s is None:
            self.timeline.set_prediction(None)
            self._summary_timer.stop()
            self.prediction.show_summary(None)
        else:
            self.timeline.set_prediction(s.overlay, self.overlay.mode_for(s))
            # the tables next event-loop turn: drawing the overlay and sizing the table columns
            # (tens of ms each on a busy machine) then never add up to one long stall
            self._summary_timer.start()
            self.scenario_list.select(s.id)
            self.panel.set_changes(s.changes)
            self.reveal_requested.emit(self.prediction)
        self.overlay.sync_mode_combo()
        self.overlay.update_shown_label()
        self.scenario_shown.emit(s)

    def _show_summary(self) -> None:
        self.prediction.show_summary(self.shown.summary if self.shown is not None else None)

    def remove_scenario(self, scenario_id: int) -> None:
        s = self.scenarios.pop(scenario_id, None)
        if s is None:
            return
        self.scenario_list.remove(scenario_id)
        self.compare.set_scenarios(self.state.listed())
        if self.shown is s:
            self.show_scenario(None)

    def rename_scenario(self, scenario_id: int, name: str) -> None:
        s = self.scenarios.get(scenario_id)
        if s is None or not name:
            return
        s.summary.name = name
        self.scenario_list.refresh(self.state.listed(), self.baseline_us)
        self.compare.set_scenarios(self.state.listed())
        self.overlay.update_shown_label()
        if self.shown is s:
            self.prediction.show_summary(s.summary)

    def compare_pair(self, a: int, b: int) -> None:
        self.compare.set_scenarios(self.state.listed())
        self.compare.show_pair(a, b)
        self.reveal_requested.emit(self.compare)

    def describe_hit(self, hit: Hit) -> EventDetails:
        """Details of a task, with the shown scenario's prediction for it (and why)."""
        assert self.loaded is not None
        tl = self.timeline
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
