"""The main window: opens jobs (folder, file, drop, recent, demo), shows the timeline, the details
and the summaries, and reports what went wrong with which file.

The window owns its parts and wires their signals: :class:`~app.job_opening.JobOpening` (loading on
a background task, each load with a new token so a stale one is never shown; drag and drop),
:class:`~app.window_menus.WindowStatus` (the status bar's widgets),
:class:`~app.window_menus.WindowMenus` (toolbar, menus) and the widgets of :mod:`app.window_chrome`.
What other code reads of a part is one :class:`~app.timeline.state.Forward` line here. This module
lays out the central area and the docks, shows a loaded job and keeps the window's settings. The
what-if workbench gives its docks, tabs and menu entries; the window places them (it opens jobs
through the job-opening part). Closing the window cancels and waits for every task.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QMainWindow,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import settings
from app.job_opening import JobOpening
from app.panels.details_panel import DetailsPanel, describe_event
from app.panels.export import export_png, export_svg
from app.panels.summary_panes import SummaryPanes
from app.theme import LIGHT, THEMES, Theme, apply_palette
from app.timeline.span_item import format_duration_ms
from app.timeline.state import Forward
from app.timeline.timeline_view import Hit, TimelineView
from app.view_model.loaded_job import LoadedJob
from app.whatif.workbench import WhatIfWorkbench
from app.window_chrome import Banner, LegendBar, WelcomePage
from app.window_menus import WindowMenus, WindowStatus


def status_text(loaded: LoadedJob, load_s: float) -> str:
    """The status bar's line about a loaded job."""
    job = loaded.job
    return f"{len(job.ranks)} rank(s), {loaded.n_events:,} events, loaded in {load_s:.2f} s" + (
        " · SYNTHETIC job (lumos synth): its times are Lumos's own models" if job.is_synthetic else ""
    )


def skipped_files_message(loaded: LoadedJob) -> str:
    """The banner's rich text about files that could not be loaded ("" when all were). A JSON
    file that is no trace at all (a run's config.json) is listed in Files, not a failure."""
    job = loaded.job
    failed = [s for s in job.skipped if not s.not_a_trace]
    if not failed:
        return ""
    files = "; ".join(f"<b>{html.escape(Path(s.file).name)}</b>: {html.escape(s.reason)}" for s in failed[:3])
    more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
    return f"{len(failed)} file(s) could not be loaded{more} — {files}. The other {len(job.ranks)} rank(s) are shown."


def size_docks(window: QMainWindow, left: list[QDockWidget], right: list[QDockWidget]) -> None:
    """Share the window between the docks, each list top to bottom: left about 22% wide (its top
    dock 68% high), right 27% wide (its top dock 60% high)."""
    window.resizeDocks(
        [left[0], right[0]],
        [max(340, int(window.width() * 0.22)), max(420, int(window.width() * 0.27))],
        Qt.Orientation.Horizontal,
    )
    h = max(window.height() - 120, 400)
    window.resizeDocks(left, [int(h * 0.68), int(h * 0.32)], Qt.Orientation.Vertical)
    window.resizeDocks(right, [int(h * 0.6), int(h * 0.4)], Qt.Orientation.Vertical)


class MainWindow(QMainWindow):
    """See the module docstring."""

    job_loaded = Signal(object)  # LoadedJob
    load_failed = Signal(str)
    load_cancelled = Signal()
    first_painted = Signal(float)  # seconds from the open request to the first timeline paint

    # what tests and the launcher read of the parts
    open_path = Forward("opening")
    open_demo = Forward("opening")
    is_loading = Forward("opening")
    last_error = Forward("opening")
    timings = Forward("opening")
    path_for_drop = Forward("opening")
    status_label = Forward("status")
    progress = Forward("status")
    cancel_button = Forward("status")
    warnings_button = Forward("status")
    search_box = Forward("menus")
    match_label = Forward("menus")
    run_search = Forward("menus")
    step_search = Forward("menus")
    iteration_combo = Forward("menus")
    recent_menu = Forward("menus")
    dark_action = Forward("menus")
    stalls_action = Forward("menus")

    def __init__(self, restore_layout: bool = True, theme: str | None = None) -> None:
        super().__init__()
        self.setObjectName("LumosMainWindow")
        self.setWindowTitle("Lumos")
        self.setAcceptDrops(True)
        self.resize(1600, 1000)
        name = theme or str(settings.settings().value("view/theme", "light"))
        self.theme = THEMES.get(name, LIGHT)
        self.loaded: LoadedJob | None = None
        self._restored = False

        self.timeline = TimelineView(self.theme)
        self.details = DetailsPanel(self.theme)
        self.summaries = SummaryPanes(self.theme)
        self.legend = LegendBar(self.theme)
        self.banner = Banner()
        self.banner.details_button.clicked.connect(self.show_files_tab)
        self.welcome = WelcomePage()

        timeline_page = QWidget()
        tl = QVBoxLayout(timeline_page)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.setSpacing(0)
        tl.addWidget(self.legend)
        tl.addWidget(self.timeline, 1)
        self.timeline_page = timeline_page
        # the timeline, and the what-if Compare and Sweep views, as tabs of the central area
        self.workspace = QTabWidget()
        self.workspace.setDocumentMode(True)
        self.workspace.addTab(timeline_page, "Timeline")
        self.pages = QStackedWidget()
        self.pages.addWidget(self.welcome)
        self.pages.addWidget(self.workspace)
        central = QWidget()
        cl = QVBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.banner)
        cl.addWidget(self.pages, 1)
        self.setCentralWidget(central)

        # summary and details stacked on the right: the timeline keeps the full height for rows
        self.summary_dock = QDockWidget("Summary", self)
        self.summary_dock.setObjectName("SummaryDock")
        self.summary_dock.setWidget(self.summaries)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.summary_dock)
        self.details_dock = QDockWidget("Details", self)
        self.details_dock.setObjectName("DetailsDock")
        self.details_dock.setWidget(self.details)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.details_dock)
        self.splitDockWidget(self.summary_dock, self.details_dock, Qt.Orientation.Vertical)
        self._docks_sized = False
        self.status = WindowStatus(self.statusBar())
        self.status.warnings_button.clicked.connect(self.show_files_tab)
        self.opening = JobOpening(self, self.summaries, self.banner, self.status)
        self.workbench = WhatIfWorkbench(self.opening, self.timeline, self.theme, self)
        self._place_workbench(tl)
        docks = [self.details_dock, self.summary_dock]
        self.menus = WindowMenus(self, self.timeline, self.workbench, self.status, docks, self.theme)
        self._connect_parts()
        self.apply_theme(self.theme)
        self.refresh_recent()
        if restore_layout:
            self._restore_layout()

    def _connect_parts(self) -> None:
        op, menus = self.opening, self.menus
        op.has_job = menus.has_job = lambda: self.loaded is not None
        op.diff_dock = self.workbench.measured_compare.dock
        op.lanes_loaded.connect(self.show_lanes)
        op.summarised.connect(self.show_summaries)
        op.recent_changed.connect(self.refresh_recent)
        op.waiting.connect(self.workbench.show_waiting)
        op.compare_requested.connect(self.workbench.measured_compare.compare_with)
        op.job_loaded.connect(self.job_loaded)
        op.load_failed.connect(self.load_failed)
        op.load_cancelled.connect(self.load_cancelled)
        for source in (self.welcome, menus):
            source.open_folder_requested.connect(op.ask_open_folder)
            source.demo_requested.connect(op.open_demo)
            source.recent_chosen.connect(op.open_path)
        menus.open_file_requested.connect(op.ask_open_file)
        menus.export_view_requested.connect(self.ask_export_view)
        menus.export_csv_requested.connect(self.ask_export_csv)
        menus.theme_chosen.connect(self.apply_theme)
        self.timeline.selection_changed.connect(self._on_selection)
        # the details of the selected task include the shown scenario's prediction: redo them
        self.workbench.scenario_shown.connect(lambda _s: self._on_selection(self.timeline.selected))
        self.summaries.idle.event_requested.connect(self._select_event)
        self.summaries.stragglers.rank_requested.connect(self.timeline.jump_to_rank)
        self.timeline.hovered.connect(self.status.show_hover)
        self.timeline.measured.connect(self._on_measured)
        self.timeline.first_paint.connect(self._on_first_paint)

    def _place_workbench(self, timeline_column: QVBoxLayout) -> None:
        """The what-if docks on the left, its Prediction tab in the summary dock, its Compare and
        Sweep tabs in the central area, its note under the legend, its corner of the status bar."""
        wb = self.workbench
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, wb.config_dock)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, wb.scenario_dock)
        self.splitDockWidget(wb.config_dock, wb.scenario_dock, Qt.Orientation.Vertical)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, wb.measured_compare.dock)
        self.summaries.insertTab(1, wb.prediction, "Prediction")  # after Iterations
        self.statusBar().addPermanentWidget(wb.status)
        timeline_column.insertWidget(1, wb.overlay_note)  # under the legend: what the overlay shows
        self.workspace.addTab(wb.compare, "Compare")
        self.workspace.addTab(wb.sweep, "Sweep")
        wb.reveal_requested.connect(self.reveal)

    def reveal(self, page: QWidget | None) -> None:
        """Bring a page to the front: a tab of the central area or of the summary dock (None: the
        timeline)."""
        if page is None:
            self.workspace.setCurrentWidget(self.timeline_page)
        elif self.workspace.indexOf(page) >= 0:
            self.workspace.setCurrentWidget(page)
        elif self.summaries.indexOf(page) >= 0:
            self.summaries.setCurrentWidget(page)

    # ------------------------------------------------------------------ showing a job
    def set_loaded(self, loaded: LoadedJob) -> None:
        """Show a job whose lanes and summaries are both prepared (:func:`~app.view_model.loaded_job.prepare_job`)."""
        self.show_lanes(loaded)
        self.show_summaries(loaded)

    def show_lanes(self, loaded: LoadedJob) -> None:
        """The timeline of a new job; its summaries follow (:meth:`show_summaries`). What showed the
        previous job is emptied, so nothing of it can be mistaken for the new one meanwhile."""
        self.loaded = loaded
        self.pages.setCurrentWidget(self.workspace)
        self.workspace.setCurrentWidget(self.timeline_page)
        self.details.show_nothing()
        if self.workbench.loaded is not None and self.workbench.loaded is not loaded:
            # drop the previous job's what-ifs now (a replay finishing later must not draw over the
            # new lanes); a session being reopened keeps its scenarios for the new job
            session = self.workbench.pending_session
            self.workbench.set_job(None)
            self.workbench.pending_session = session
        if self.summaries.loaded is not loaded:
            self.summaries.set_job(None)
        self.timeline.set_job(loaded)
        # every family drawn somewhere in this job, GPU families first (the enum's order)
        present = sorted({int(f) for fam in loaded.families for f in np.unique(fam)})
        self.legend.set_families(present)
        self.menus.show_job(self.timeline.iteration_names)
        self.setWindowTitle(f"Lumos — {loaded.title}")
        self.status_label.setText(status_text(loaded, self.timings.get("load_s", loaded.load_s)))
        self.summaries.setCurrentIndex(0)
        failed = skipped_files_message(loaded)
        if failed:
            self.summaries.setCurrentWidget(self.summaries.files_tab)
            self.banner.show_message(failed, error=True)
        self.status.show_warnings([w for w in loaded.job.warnings if not w.startswith("skipped ")])

    def show_summaries(self, loaded: LoadedJob) -> None:
        """The summary panes, the timeline's idle marks and the what-if workbench of the job whose
        lanes are shown, once its summaries are in."""
        if loaded is not self.loaded:
            return
        self.timeline.set_summaries(loaded)
        self.summaries.set_job(loaded)
        self.status_label.setText(status_text(loaded, self.timings.get("load_s", loaded.load_s)))
        if any(not s.not_a_trace for s in loaded.job.skipped):
            self.summaries.setCurrentWidget(self.summaries.files_tab)
        self.workbench.set_job(loaded, demo=self.opening.loading_path == "demo")

    def show_files_tab(self) -> None:
        self.summary_dock.show()
        self.summaries.setCurrentWidget(self.summaries.files_tab)

    # ------------------------------------------------------------------ interaction
    def _on_selection(self, hit: Hit | None) -> None:
        if hit is None or self.loaded is None:
            self.details.show_nothing()
            return
        if self.workbench.loaded is not self.loaded:  # lanes shown, summaries (and what-ifs) to come
            self.details.show_details(describe_event(self.loaded, hit.rank_index, hit.event))
            return
        self.details.show_details(self.workbench.describe_hit(hit))

    def _select_event(self, rank_index: int, event: int) -> None:
        """Select (and scroll to) a task a summary table points at, e.g. an unexplained delay's."""
        self.timeline.select(Hit(rank_index, event), reveal=True)

    def _on_measured(self, a: float, b: float) -> None:
        self.status_label.setText(f"Measured {format_duration_ms(b - a)} ({a:.6f} → {b:.6f} ms)")

    def _on_first_paint(self, _paint_s: float) -> None:
        self.timings["first_paint_s"] = self.opening.seconds_since_open()
        self.first_painted.emit(self.timings["first_paint_s"])
        self.opening.lanes_painted()

    def apply_theme(self, theme: Theme) -> None:
        """Re-theme every pane (the one place that does)."""
        self.theme = theme
        apply_palette(QApplication.instance(), theme)
        self.timeline.apply_theme(theme)
        self.details.apply_theme(theme)
        self.summaries.apply_theme(theme)
        self.workbench.apply_theme(theme)
        self.legend.apply_theme(theme)
        self.legend.setStyleSheet(f"background: {theme.background}; color: {theme.foreground};")

    # ------------------------------------------------------------------ export
    def ask_export_view(self, fmt: str) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export view", f"lumos-timeline.{fmt}", f"{fmt.upper()} (*.{fmt})"
        )
        if path:
            self.export_view(path)

    def export_view(self, path: str | Path) -> Path:
        """The timeline with its legend, as PNG or SVG (by the file suffix)."""
        path = Path(path)
        if path.suffix.lower() == ".svg":
            return export_svg(self.timeline_page, path, self.windowTitle())
        return export_png(self.timeline_page, path)

    def ask_export_csv(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Export summaries as CSV into folder")
        if folder:
            written = self.summaries.export_all(folder)
            self.status_label.setText(f"Wrote {len(written)} CSV file(s) to {folder}")

    # ------------------------------------------------------------------ settings and shutdown
    def showEvent(self, ev: QShowEvent) -> None:
        super().showEvent(ev)
        if not self._docks_sized and not self._restored:
            self._docks_sized = True
            # dock sizes only stick once the window is laid out at its real size
            left = [self.workbench.config_dock, self.workbench.scenario_dock]
            QTimer.singleShot(0, lambda: size_docks(self, left, [self.summary_dock, self.details_dock]))

    def refresh_recent(self) -> None:
        paths = settings.recent_paths()
        self.menus.set_recent(paths)
        self.welcome.set_recent(paths)

    def _restore_layout(self) -> None:
        s = settings.settings()
        geometry = s.value("window/geometry")
        state = s.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self._restored = bool(self.restoreState(state))

    def save_layout(self) -> None:
        s = settings.settings()
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.sync()

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Cancel and wait for every background task (call before the window goes away)."""
        self.workbench.shutdown()
        self.opening.stop_loads(timeout_ms)
        QApplication.processEvents()
        self.opening.remove_drop_folders()

    def dragEnterEvent(self, ev: QDragEnterEvent) -> None:
        self.opening.drag_enter(ev)

    def dropEvent(self, ev: QDropEvent) -> None:
        self.opening.drop(ev)

    def closeEvent(self, ev: QCloseEvent) -> None:
        self.save_layout()
        self.shutdown()
        super().closeEvent(ev)
