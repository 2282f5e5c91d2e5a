"""The what-if entries of the main window's toolbar and menus: the overlay-mode box; sessions and
scenario exports in File; the What-if menu (estimate, replay, cancel, the grid sweep, the pages).

:class:`WorkbenchMenus` is one part of :class:`~app.whatif.workbench.WhatIfWorkbench`; the window
calls its ``install_*`` methods where the entries belong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QDockWidget, QMenu, QToolBar

from app.sweep.sweep_dialog import GridSweepDialog
from app.sweep.sweep_view import SweepView
from app.whatif.compare_view import CompareView
from app.whatif.config_panel import ConfigPanel
from app.whatif.measured_compare import MeasuredCompare
from app.whatif.runner import Scenario, WhatIfRunner


class WorkbenchMenus:
    """Toolbar and menu entries of the workbench (see the module docstring)."""

    mode_combo: QComboBox
    config_dock: QDockWidget
    scenario_dock: QDockWidget
    panel: ConfigPanel
    runner: WhatIfRunner
    grid_sweep: GridSweepDialog
    compare: CompareView
    measured_compare: MeasuredCompare
    sweep: SweepView
    shown: Scenario | None
    reveal_requested: Signal

    if TYPE_CHECKING:  # provided by the workbench and its parts

        def ask_open_session(self) -> None: ...
        def ask_save_session(self) -> None: ...
        def ask_export_timeline(self, scenario_id: int) -> None: ...
        def ask_export_tables(self, scenario_id: int) -> None: ...
        def request_replay(self) -> bool: ...
        def ask_predict_from(self) -> None: ...

    def install_toolbar(self, tb: QToolBar) -> None:
        tb.addSeparator()
        tb.addWidget(self.mode_combo)

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
            ("Open &Session…", self.ask_open_session, None),
            ("Sa&ve Session…", self.ask_save_session, QKeySequence.StandardKey.Save),
        ):
            a = QAction(text, file_menu)
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
        view_menu.addSeparator()
        view_menu.addAction(self.config_dock.toggleViewAction())
        view_menu.addAction(self.scenario_dock.toggleViewAction())
        for text, key, slot in (
            ("&Estimate", "Ctrl+E", self.panel.request_estimate),
            ("&Replay Baseline", "Ctrl+R", self.request_replay),
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
        predict.triggered.connect(lambda _c=False: self.ask_predict_from())
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
        return self.shown.id if self.shown is not None else -1
