"""The what-if entries of the main window's toolbar and menus: the overlay-mode box; sessions and
scenario exports in File; the What-if menu (estimate, replay, cancel, the grid sweep, the pages).

:class:`WorkbenchMenus` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`, built from the
parts whose actions it offers; the window calls its ``install_*`` methods (through the workbench)
where the entries belong, and ``reveal_requested`` asks for a page to be brought to the front.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMenu, QToolBar

from app.sweep.sweep_dialog import GridSweepDialog
from app.sweep.sweep_view import SweepView
from app.whatif.compare_view import CompareView
from app.whatif.config_panel import ConfigPanel
from app.whatif.measured_compare import MeasuredCompare
from app.whatif.overlay_choice import OverlayChoice
from app.whatif.run_requests import RunRequests
from app.whatif.runner import WhatIfRunner
from app.whatif.scenario_export import ScenarioExport
from app.whatif.session_keeping import SessionKeeping
from app.whatif.workbench_state import WorkbenchState


class WorkbenchMenus(QObject):
    """Toolbar and menu entries of the workbench (see the module docstring)."""

    reveal_requested = Signal(object)  # a page of the workbench; None: the timeline

    def __init__(
        self,
        docks: tuple[QDockWidget, QDockWidget],  # the What-if and Scenarios docks
        views: tuple[CompareView, SweepView, MeasuredCompare],
        engine: tuple[WhatIfRunner, ConfigPanel, GridSweepDialog],
        parts: tuple[OverlayChoice, RunRequests, ScenarioExport, SessionKeeping],
        state: WorkbenchState,
    ) -> None:
        super().__init__()
        self.config_dock, self.scenario_dock = docks
        self.compare, self.sweep, self.measured_compare = views
        self.runner, self.panel, self.grid_sweep = engine
        self.overlay, self.requests, self.exports, self.sessions = parts
        self.state = state

    def install_toolbar(self, tb: QToolBar) -> None:
        tb.addSeparator()
        tb.addWidget(self.overlay.mode_combo)

    def install_file_menu(self, file_menu: QMenu) -> None:
        """Compare, session and scenario export entries (appended where the window calls this)."""
        file_menu.addSeparator()
        cmp_action = QAction("Compare with &Measured Job…", file_menu)
        cmp_action.setToolTip(
            "Draw another run under this one, iterations aligned, with a Diff pane (lumos diff)"
        )
        cmp_action.triggered.connect(lambda _c=False: self.measured_compare.ask())
        file_menu.addAction(cmp_action)
        for text, slot, key in (
            ("Open &Session…", self.sessions.ask_open_session, None),
            ("Sa&ve Session…", self.sessions.ask_save_session, QKeySequence.StandardKey.Save),
        ):
            a = QAction(text, file_menu)
            if key is not None:
                a.setShortcut(QKeySequence(key))
            a.triggered.connect(lambda _c=False, f=slot: f())
            file_menu.addAction(a)
        exp = file_menu.addMenu("Export Scenario")
        exp.addAction(
            "Predicted Timeline (Kineto/Perfetto JSON)…",
            lambda: self.exports.ask_export_timeline(self._shown_id()),
        )
        exp.addAction("Tables (CSV)…", lambda: self.exports.ask_export_tables(self._shown_id()))

    def install_menus(self, view_menu: QMenu, run_menu: QMenu) -> None:
        view_menu.addSeparator()
        view_menu.addAction(self.config_dock.toggleViewAction())
        view_menu.addAction(self.scenario_dock.toggleViewAction())
        for text, key, slot in (
            ("&Estimate", "Ctrl+E", self.panel.request_estimate),
            ("&Replay Baseline", "Ctrl+R", self.requests.request_replay),
            ("&Cancel Run", "Ctrl+.", self.runner.cancel),
        ):
            a = QAction(text, run_menu)
            a.setShortcut(QKeySequence(key))
            a.triggered.connect(slot)
            run_menu.addAction(a)
        run_menu.addAction(self.grid_sweep.open_action)
        run_menu.addSeparator()
        predict = QAction("&Predict This Job from…", run_menu)
        predict.setToolTip(
            "Pick the traces of another run: the knobs that differ are estimated from it and drawn over "
            "this job, with the error per family and collective (lumos validate OTHER THIS)"
        )
        predict.triggered.connect(lambda _c=False: self.requests.ask_predict_from())
        run_menu.addAction(predict)
        run_menu.addSeparator()
        for label, tab in (
            ("Show &Timeline", None),
            ("Show &Compare", self.compare),
            ("Show S&weep", self.sweep),
        ):
            a = QAction(label, run_menu)
            a.triggered.connect(lambda _c=False, t=tab: self.reveal_requested.emit(t))
            run_menu.addAction(a)

    def _shown_id(self) -> int:
        return self.state.shown.id if self.state.shown is not None else -1
