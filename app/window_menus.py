"""The main window's controls: status bar, toolbar (search, iterations, zoom) and menus, and what
their simple entries do (search steps, CPU threads, theme).

:class:`WindowStatus` (the status bar's widgets) and :class:`WindowMenus` (toolbar and menus) are
parts the main window owns. The menus act on the timeline and the window directly and ask for the
rest (opening, exporting, a theme) through signals; the what-if workbench adds its own entries
through its ``install_*`` methods.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QProgressBar,
    QPushButton,
    QStatusBar,
    QToolBar,
    QToolButton,
)

from app import settings
from app.cache_dialog import ask_cache_max, warnings_label
from app.elided_label import ElidedLabel
from app.theme import DARK, LIGHT, Theme
from app.timeline.timeline_view import TimelineView
from app.whatif.workbench import WhatIfWorkbench
from app.window_chrome import KEYS_HELP


class WindowStatus:
    """The status bar's widgets: the line about the job, the hovered task, a load's progress and
    its Cancel button, and the loader's warnings (a button showing the Files tab)."""

    def __init__(self, bar: QStatusBar) -> None:
        self.status_label = ElidedLabel("Open a trace folder to begin.")
        self.hover_label = QLabel()
        self.hover_label.setMinimumWidth(100)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFixedWidth(220)
        self.progress.setTextVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.warnings_button = QToolButton()
        self.warnings_button.setAutoRaise(True)
        self.warnings_button.hide()
        bar.addWidget(self.status_label, 3)  # room for "parsing 12 of 256 files, 1.2 of 9.8 GB · ETA"
        bar.addWidget(self.warnings_button)
        bar.addWidget(self.hover_label, 1)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.cancel_button)
        self.progress.hide()
        self.cancel_button.hide()

    def show_hover(self, text: str) -> None:
        metrics = self.hover_label.fontMetrics()
        self.hover_label.setText(
            metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(self.hover_label.width(), 100))
        )

    def show_warnings(self, warnings: list[str]) -> None:
        """Routine loader warnings: a status-bar button, not a banner over the timeline."""
        self.warnings_button.setText(warnings_label(warnings))  # names a skipped cache, if any
        self.warnings_button.setToolTip("\n".join(warnings[:10]))
        self.warnings_button.setVisible(bool(warnings))


class WindowMenus(QObject):
    """Toolbar and menus of the main window (see the module docstring)."""

    open_folder_requested = Signal()
    open_file_requested = Signal()
    demo_requested = Signal()
    recent_chosen = Signal(str)
    export_view_requested = Signal(str)  # "png" or "svg"
    export_csv_requested = Signal()
    theme_chosen = Signal(object)  # Theme

    def __init__(
        self,
        window: QMainWindow,
        timeline: TimelineView,
        workbench: WhatIfWorkbench,
        status: WindowStatus,
        docks: list[QDockWidget],
        theme: Theme,
    ) -> None:
        super().__init__(window)
        self.window = window
        self.timeline = timeline
        self.workbench = workbench
        self.status = status
        self.has_job: Callable[[], bool] = lambda: False  # the window says whether a job is shown
        self.build_toolbar()
        self.build_menus(docks, theme)

    def build_toolbar(self) -> None:
        tb = QToolBar("Main")
        tb.setObjectName("MainToolbar")
        tb.setMovable(False)
        self.window.addToolBar(tb)
        open_action = QAction("Open Folder…", self.window)
        open_action.triggered.connect(self.open_folder_requested)
        tb.addAction(open_action)
        tb.addSeparator()
        self.search_box = QLineEdit()
        self.search_box.setPlaceholderText("Search tasks in all ranks (Enter: next)")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.setFixedWidth(320)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(250)
        self._search_timer.timeout.connect(self.run_search)
        self.search_box.textChanged.connect(lambda _t: self._search_timer.start())
        self.search_box.returnPressed.connect(lambda: self.step_search(1))
        tb.addWidget(self.search_box)
        prev_b = QToolButton()
        prev_b.setText("◀")
        prev_b.setToolTip("Previous match (P)")
        prev_b.clicked.connect(lambda: self.step_search(-1))
        next_b = QToolButton()
        next_b.setText("▶")
        next_b.setToolTip("Next match (N, Enter)")
        next_b.clicked.connect(lambda: self.step_search(1))
        tb.addWidget(prev_b)
        tb.addWidget(next_b)
        self.match_label = QLabel("")
        self.match_label.setMinimumWidth(110)
        self.match_label.setContentsMargins(6, 0, 6, 0)
        tb.addWidget(self.match_label)
        tb.addSeparator()
        self.iteration_combo = QComboBox()
        self.iteration_combo.setMinimumWidth(200)
        self.iteration_combo.activated.connect(self._on_iteration_chosen)
        tb.addWidget(self.iteration_combo)
        reset = QAction("Reset Zoom", self.window)
        reset.setToolTip("Show the whole job (0)")
        reset.triggered.connect(self.timeline.reset_view)
        tb.addAction(reset)
        zoom_sel = QAction("Zoom to Selection", self.window)
        zoom_sel.setToolTip("Zoom to the selected task or measured span (F)")
        zoom_sel.triggered.connect(self.timeline.zoom_to_selection)
        tb.addAction(zoom_sel)
        self.workbench.install_toolbar(tb)

    def build_menus(self, docks: list[QDockWidget], theme: Theme) -> None:
        mb = self.window.menuBar()
        file_menu = mb.addMenu("&File")
        self._add(file_menu, "&Open Folder…", self.open_folder_requested.emit, QKeySequence.StandardKey.Open)
        self._add(file_menu, "Open &File…", self.open_file_requested.emit)
        self._add(file_menu, "Open &Demo Job", self.demo_requested.emit)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.workbench.install_file_menu(file_menu)
        file_menu.addSeparator()
        self._add(file_menu, "Export View as &PNG…", lambda: self.export_view_requested.emit("png"))
        self._add(file_menu, "Export View as &SVG…", lambda: self.export_view_requested.emit("svg"))
        self._add(file_menu, "Export Summaries as &CSV…", self.export_csv_requested.emit)
        file_menu.addSeparator()
        self._add(file_menu, "Cache Size &Limit…", lambda: ask_cache_max(self.window))
        self._add(file_menu, "&Quit", self.window.close, QKeySequence.StandardKey.Quit)

        view = mb.addMenu("&View")
        self._add(view, "Reset Zoom\t0", self.timeline.reset_view)
        self._add(view, "Zoom to Selection\tF", self.timeline.zoom_to_selection)
        self._add(view, "Next Iteration\t]", lambda: self.timeline.step_iteration(1))
        self._add(view, "Previous Iteration\t[", lambda: self.timeline.step_iteration(-1))
        view.addSeparator()
        self._add(view, "Collapse All Ranks", lambda: self.timeline.set_all_ranks_collapsed(True))
        self._add(view, "Expand All Ranks", lambda: self.timeline.set_all_ranks_collapsed(False))
        self.cpu_action = self._add(view, "Show CPU Threads", self._toggle_cpu)
        self.cpu_action.setCheckable(True)
        view.addSeparator()
        self.stalls_action = self._add(view, "Keep Unexplained GPU Stalls in Replays", self._toggle_stalls)
        self.stalls_action.setCheckable(True)
        self.stalls_action.setToolTip(
            "Replay the trace's unexplained GPU delays (hatched) as fixed waits: for a job disturbed "
            "while it was traced. The baseline replay runs again; what-ifs say whether stalls were kept."
        )
        view.addSeparator()
        self.dark_action = self._add(view, "Dark Theme", self._toggle_theme)
        self.dark_action.setCheckable(True)
        self.dark_action.setChecked(theme.name == "dark")
        view.addSeparator()
        for dock in docks:
            view.addAction(dock.toggleViewAction())
        self.workbench.install_menus(view, mb.addMenu("&What-if"))

        help_menu = mb.addMenu("&Help")
        self._add(help_menu, "Navigation Keys", lambda: self.status.status_label.setText(KEYS_HELP))

    def _toggle_stalls(self) -> None:
        if self.workbench.runner.set_keep_stalls(self.stalls_action.isChecked()) and self.has_job():
            self.workbench.request_replay()

    def _add(self, menu: QMenu, text: str, slot: Callable[[], object], shortcut=None) -> QAction:  # type: ignore[no-untyped-def]
        action = QAction(text, self.window)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda _checked=False: slot())
        menu.addAction(action)
        return action

    # ------------------------------------------------------------------ what the entries do
    def run_search(self) -> int:
        n = self.timeline.set_search(self.search_box.text())
        self.match_label.setText(f"{n:,} match{'es' * (n != 1)}" if self.search_box.text().strip() else "")
        return n

    def step_search(self, delta: int) -> None:
        if self._search_timer.isActive():
            self._search_timer.stop()
            self.run_search()
        hit = self.timeline.step_match(delta)
        if hit is not None:
            self.match_label.setText(f"{self.timeline.match_index + 1:,} / {self.timeline.match_count:,}")

    def _on_iteration_chosen(self, index: int) -> None:
        if index > 0:
            self.timeline.zoom_to_iteration(index - 1)

    def _toggle_cpu(self) -> None:
        self.timeline.set_all_cpu_expanded(self.cpu_action.isChecked())

    def _toggle_theme(self) -> None:
        theme = DARK if self.dark_action.isChecked() else LIGHT
        settings.settings().setValue("view/theme", theme.name)
        self.theme_chosen.emit(theme)

    def set_recent(self, paths: list[str]) -> None:
        self.recent_menu.clear()
        for p in paths:
            action = QAction(p, self.window)
            action.triggered.connect(partial(self.recent_chosen.emit, p))
            self.recent_menu.addAction(action)
        self.recent_menu.setEnabled(bool(paths))

    def show_job(self, iteration_names: list[str]) -> None:
        """A new job is shown: its iterations in the combo, no search of the previous one."""
        self.iteration_combo.clear()
        self.iteration_combo.addItem("Zoom to iteration…")
        for name in iteration_names:
            self.iteration_combo.addItem(name)
        self.search_box.clear()
        self.match_label.setText("")
