"""The main window: opens jobs (folder, file, drop, recent, demo), shows the timeline, the details
and the summaries, and reports what went wrong with which file.

Loading runs on a :class:`~app.jobs.BackgroundTask`. Each load gets a new token; news from any other
token is ignored, so opening B while A is still loading can never show A. Closing the window
cancels and waits for every task.
"""

from __future__ import annotations

import html
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QTabWidget,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import settings
from app.demo_source import DEMO_UNAVAILABLE, demo_generator
from app.jobs import BackgroundTask
from app.loaded_job import LoadedJob, prepare_job
from app.panels.details_panel import DetailsPanel
from app.panels.export import export_png, export_svg
from app.panels.summary_panes import SummaryPanes
from app.theme import DARK, LIGHT, THEMES, Theme, apply_palette
from app.timeline.timeline_view import Hit, TimelineView
from app.whatif.workbench import WhatIfWorkbench
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.loader import TRACE_SUFFIXES

KEYS_HELP = (
    "Wheel: zoom at the cursor · Shift+wheel: scroll rows · drag: pan · Shift+drag: measure · "
    "W/S zoom · A/D pan · F zoom to selection · 0 reset · [ ] iterations · N/P search matches · Esc clear"
)


class LegendBar(QLabel):
    """Colour chips of the families present in the job."""

    def __init__(self, theme: Theme) -> None:
        super().__init__()
        self.theme = theme
        self.families: list[int] = []
        self.setWordWrap(True)
        self.setContentsMargins(8, 2, 8, 2)

    def set_families(self, families: list[int]) -> None:
        self.families = families
        self._render()

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self._render()

    def _render(self) -> None:
        # unbreakable chips (no-break spaces, a word joiner after "/"): lines wrap only between chips
        chips = [
            f"<span style='color:{self.theme.family_color(f).name()}; font-size:14px'>■</span>&nbsp;"
            + html.escape(Family(f).label).replace(" ", "&nbsp;").replace("/", "/\u2060")
            for f in self.families
        ]
        self.setText("&nbsp;&nbsp; ".join(chips))  # the plain space is where lines may wrap


class Banner(QFrame):
    """A dismissible strip above the timeline for load errors and skipped files."""

    def __init__(self) -> None:
        super().__init__()
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Show files")
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 4, 6, 4)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.details_button)
        lay.addWidget(close)
        self.hide()

    def show_message(self, message: str, error: bool) -> None:
        bg, fg = ("#FDECEA", "#8A1C1C") if error else ("#FFF6DB", "#6B4E00")
        self.setStyleSheet(
            f"Banner {{ background: {bg}; border-bottom: 1px solid {fg}; }} QLabel {{ color: {fg}; }}"
        )
        self.text.setText(message)
        self.show()


class WelcomePage(QWidget):
    """What the window shows before a job is open."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__()
        title = QLabel("<h1>Lumos</h1>")
        sub = QLabel(
            "Open a folder of per-rank PyTorch profiler (Kineto) traces to see every rank's timeline, "
            "iteration breakdowns, top kernels and collectives.<br>"
            "Drop a folder or trace files anywhere in this window, or try the demo job."
        )
        sub.setWordWrap(True)
        open_button = QPushButton("Open Folder…")
        open_button.clicked.connect(window.ask_open_folder)
        demo_button = QPushButton("Open Demo Job")
        demo_button.clicked.connect(window.open_demo)
        self.recent = QListWidget()
        self.recent.itemActivated.connect(lambda item: window.open_path(item.text()))
        buttons = QHBoxLayout()
        buttons.addWidget(open_button)
        buttons.addWidget(demo_button)
        buttons.addStretch(1)
        inner = QVBoxLayout()
        inner.addWidget(title)
        inner.addWidget(sub)
        inner.addLayout(buttons)
        inner.addWidget(QLabel("Recent:"))
        inner.addWidget(self.recent)
        box = QWidget()
        box.setLayout(inner)
        box.setMaximumWidth(720)
        outer = QHBoxLayout(self)
        outer.addStretch(1)
        outer.addWidget(box, 4)
        outer.addStretch(1)

    def set_recent(self, paths: list[str]) -> None:
        self.recent.clear()
        self.recent.addItems(paths)


class MainWindow(QMainWindow):
    job_loaded = Signal(object)  # LoadedJob
    load_failed = Signal(str)
    load_cancelled = Signal()
    first_painted = Signal(float)  # seconds from the open request to the first timeline paint

    def __init__(self, restore_layout: bool = True, theme: str | None = None) -> None:
        super().__init__()
        self.setObjectName("LumosMainWindow")
        self.setWindowTitle("Lumos")
        self.setAcceptDrops(True)
        self.resize(1600, 1000)
        name = theme or str(settings.settings().value("view/theme", "light"))
        self.theme = THEMES.get(name, LIGHT)
        self.loaded: LoadedJob | None = None
        self.loading_path: str | None = None
        self.last_error: str | None = None
        self.timings: dict[str, float] = {}
        self._token = 0
        self._tasks: dict[int, BackgroundTask] = {}
        self._open_started = 0.0
        self._drop_dirs: list[tempfile.TemporaryDirectory[str]] = []
        self._restored = False

        self.timeline = TimelineView(self.theme)
        self.details = DetailsPanel(self.theme)
        self.summaries = SummaryPanes(self.theme)
        self.legend = LegendBar(self.theme)
        self.banner = Banner()
        self.banner.details_button.clicked.connect(self.show_files_tab)
        self.welcome = WelcomePage(self)

        timeline_page = QWidget()
        tl = QVBoxLayout(timeline_page)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.setSpacing(0)
        tl.addWidget(self.legend)
        tl.addWidget(self.timeline, 1)
        self.timeline_page = timeline_page
        # the timeline, and part 2's Compare and Sweep views, as tabs of the central area
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
        self._build_status_bar()
        self.workbench = WhatIfWorkbench(self)
        tl.insertWidget(1, self.workbench.overlay_note)  # under the legend: what the overlay shows
        self.workspace.addTab(self.workbench.compare, "Compare")
        self.workspace.addTab(self.workbench.sweep, "Sweep")

        self._build_toolbar()
        self._build_menus()
        self.timeline.selection_changed.connect(self._on_selection)
        self.timeline.hovered.connect(self._on_hover)
        self.timeline.measured.connect(self._on_measured)
        self.timeline.first_paint.connect(self._on_first_paint)
        self._apply_theme(self.theme)
        self._refresh_recent()
        if restore_layout:
            self._restore_layout()

    # ------------------------------------------------------------------ construction
    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.status_label = QLabel("Open a trace folder to begin.")
        self.hover_label = QLabel()
        self.hover_label.setMinimumWidth(100)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFixedWidth(220)
        self.progress.setTextVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_load)
        self.warnings_button = QToolButton()
        self.warnings_button.setAutoRaise(True)
        self.warnings_button.clicked.connect(self.show_files_tab)
        self.warnings_button.hide()
        bar.addWidget(self.status_label)
        bar.addWidget(self.warnings_button)
        bar.addWidget(self.hover_label, 1)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.cancel_button)
        self.progress.hide()
        self.cancel_button.hide()

    def _build_toolbar(self) -> None:
        tb = QToolBar("Main")
        tb.setObjectName("MainToolbar")
        tb.setMovable(False)
        self.addToolBar(tb)
        open_action = QAction("Open Folder…", self)
        open_action.triggered.connect(self.ask_open_folder)
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
        reset = QAction("Reset Zoom", self)
        reset.setToolTip("Show the whole job (0)")
        reset.triggered.connect(self.timeline.reset_view)
        tb.addAction(reset)
        zoom_sel = QAction("Zoom to Selection", self)
        zoom_sel.setToolTip("Zoom to the selected task or measured span (F)")
        zoom_sel.triggered.connect(self.timeline.zoom_to_selection)
        tb.addAction(zoom_sel)
        self.workbench.install_toolbar(tb)

    def _build_menus(self) -> None:
        mb = self.menuBar()
        file_menu = mb.addMenu("&File")
        self._add(file_menu, "&Open Folder…", self.ask_open_folder, QKeySequence.StandardKey.Open)
        self._add(file_menu, "Open &File…", self.ask_open_file)
        self._add(file_menu, "Open &Demo Job", self.open_demo)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.workbench.install_file_menu(file_menu)
        file_menu.addSeparator()
        self._add(file_menu, "Export View as &PNG…", lambda: self.ask_export_view("png"))
        self._add(file_menu, "Export View as &SVG…", lambda: self.ask_export_view("svg"))
        self._add(file_menu, "Export Summaries as &CSV…", self.ask_export_csv)
        file_menu.addSeparator()
        self._add(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)

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
        self.dark_action = self._add(view, "Dark Theme", self._toggle_theme)
        self.dark_action.setCheckable(True)
        self.dark_action.setChecked(self.theme.name == "dark")
        view.addSeparator()
        view.addAction(self.details_dock.toggleViewAction())
        view.addAction(self.summary_dock.toggleViewAction())
        self.workbench.install_menus(view, mb.addMenu("&What-if"))

        help_menu = mb.addMenu("&Help")
        self._add(help_menu, "Navigation Keys", lambda: self.status_label.setText(KEYS_HELP))

    def _add(self, menu, text: str, slot: Callable[[], object], shortcut=None) -> QAction:  # type: ignore[no-untyped-def]
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda _checked=False: slot())
        menu.addAction(action)
        return action

    # ------------------------------------------------------------------ opening
    def ask_open_folder(self) -> None:
        start = (settings.recent_paths() or [str(Path.home())])[0]
        path = QFileDialog.getExistingDirectory(self, "Open trace folder", start)
        if path:
            self.open_path(path)

    def ask_open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open trace file", str(Path.home()), "Kineto traces (*.json *.json.gz);;All files (*)"
        )
        if path:
            self.open_path(path)

    def open_path(self, path: str | Path) -> int:
        """Start loading ``path`` (folder or file) in the background; returns the job token."""
        path = str(path)
        return self._start(partial(prepare_job, path), path, f"Opening {path}…")

    def open_demo(self) -> int:
        make = demo_generator()
        if make is None:
            self._show_error(DEMO_UNAVAILABLE)
            return -1

        def load_demo(
            progress: Callable[[float, str], None], on_file: Callable[[str, str, str], None]
        ) -> LoadedJob:
            folder = make(lambda f, m: progress(0.3 * f, f"generating the demo job: {m}"))
            lj = prepare_job(str(folder), lambda f, m: progress(0.3 + 0.7 * f, m), on_file)
            lj.display_name = "Lumos demo job"
            return lj

        return self._start(load_demo, "demo", "Opening the demo job…")

    def _start(self, fn: Callable[..., LoadedJob], path: str, message: str) -> int:
        for task in self._tasks.values():
            task.cancel()
        self._token += 1
        token = self._token
        self.loading_path = path
        self.last_error = None
        self._open_started = time.perf_counter()
        self.timings = {}
        task = BackgroundTask(fn, token)
        task.progressed.connect(self._on_progress)
        task.file_status.connect(self._on_file_status)
        task.succeeded.connect(self._on_loaded)
        task.failed.connect(self._on_failed)
        task.cancelled.connect(self._on_cancelled)
        task.finished.connect(self._on_task_finished)
        self._tasks[token] = task
        self.summaries.start_load()
        self.summaries.setCurrentWidget(self.summaries.files_tab)  # per-file status while loading
        self.banner.hide()
        self.status_label.setText(message)
        self.progress.setValue(0)
        self.progress.show()
        self.cancel_button.show()
        self.cancel_button.setEnabled(True)
        task.start()
        return token

    def cancel_load(self) -> None:
        task = self._tasks.get(self._token)
        if task is not None:
            task.cancel()
            self.cancel_button.setEnabled(False)
            self.status_label.setText("Cancelling…")

    @property
    def is_loading(self) -> bool:
        return self._token in self._tasks

    # ---- task news (GUI thread)
    def _on_progress(self, token: int, fraction: float, message: str) -> None:
        if token != self._token:
            return
        self.progress.setValue(int(1000 * min(max(fraction, 0.0), 1.0)))
        self.status_label.setText(message)

    def _on_file_status(self, token: int, file: str, state: str, detail: str) -> None:
        if token == self._token:
            self.summaries.set_file_status(file, state, detail)

    def _on_loaded(self, token: int, loaded: LoadedJob) -> None:
        if token != self._token:
            return  # a newer load was started: this result is stale
        self.timings["load_s"] = time.perf_counter() - self._open_started
        self.set_loaded(loaded)
        if loaded.path and self.loading_path != "demo":
            settings.remember_path(loaded.path)
            self._refresh_recent()
        self.job_loaded.emit(loaded)

    def _on_failed(self, token: int, message: str) -> None:
        if token != self._token:
            return
        self._show_error(f"Could not open {self.loading_path}: {message}")
        self.summaries.set_load_error(message)
        self.load_failed.emit(message)

    def _on_cancelled(self, token: int) -> None:
        if token != self._token:
            return
        self.status_label.setText("Loading cancelled.")
        self.load_cancelled.emit()

    def _on_task_finished(self, token: int) -> None:
        task = self._tasks.pop(token, None)
        if task is not None:
            task.wait()
            task.deleteLater()
        if token == self._token:
            self.progress.hide()
            self.cancel_button.hide()

    def _show_error(self, message: str) -> None:
        self.last_error = message
        self.banner.show_message(html.escape(message), error=True)
        self.status_label.setText("Loading failed.")

    # ------------------------------------------------------------------ showing a job
    def set_loaded(self, loaded: LoadedJob) -> None:
        self.loaded = loaded
        self.pages.setCurrentWidget(self.workspace)
        self.workspace.setCurrentWidget(self.timeline_page)
        self.details.show_nothing()
        self.timeline.set_job(loaded)
        self.summaries.set_job(loaded)
        # every family drawn somewhere in this job, GPU families first (the enum's order)
        present = sorted({int(f) for fam in loaded.families for f in np.unique(fam)})
        self.legend.set_families(present)
        self.iteration_combo.clear()
        self.iteration_combo.addItem("Zoom to iteration…")
        for name in self.timeline.iteration_names:
            self.iteration_combo.addItem(name)
        self.setWindowTitle(f"Lumos — {loaded.title}")
        job = loaded.job
        self.status_label.setText(
            f"{len(job.ranks)} rank(s), {loaded.n_tasks:,} tasks, loaded in {self.timings.get('load_s', loaded.load_s):.2f} s"
        )
        self.summaries.setCurrentIndex(0)
        if job.skipped:
            self.summaries.setCurrentWidget(self.summaries.files_tab)
            files = "; ".join(
                f"<b>{html.escape(Path(s.file).name)}</b>: {html.escape(s.reason)}" for s in job.skipped[:3]
            )
            more = f" (and {len(job.skipped) - 3} more)" if len(job.skipped) > 3 else ""
            self.banner.show_message(
                f"{len(job.skipped)} file(s) could not be loaded{more} — {files}. "
                f"The other {len(job.ranks)} rank(s) are shown.",
                error=True,
            )
        # routine loader warnings go to a status-bar button, not a banner over the timeline
        warnings = [w for w in job.warnings if not w.startswith("skipped ")]
        self.warnings_button.setText(f"⚠ {len(warnings)} warning{'s' * (len(warnings) != 1)}")
        self.warnings_button.setToolTip("\n".join(warnings[:10]))
        self.warnings_button.setVisible(bool(warnings))
        self.search_box.clear()
        self.match_label.setText("")
        self.workbench.set_job(loaded, demo=self.loading_path == "demo")

    def show_files_tab(self) -> None:
        self.summary_dock.show()
        self.summaries.setCurrentWidget(self.summaries.files_tab)

    # ------------------------------------------------------------------ interaction
    def _on_selection(self, hit: Hit | None) -> None:
        if hit is None or self.loaded is None:
            self.details.show_nothing()
            return
        self.details.show_details(self.workbench.describe_hit(hit))

    def _on_hover(self, text: str) -> None:
        metrics = self.hover_label.fontMetrics()
        self.hover_label.setText(
            metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(self.hover_label.width(), 100))
        )

    def _on_measured(self, a: float, b: float) -> None:
        from app.timeline.span_item import format_duration_ms

        self.status_label.setText(f"Measured {format_duration_ms(b - a)} ({a:.6f} → {b:.6f} ms)")

    def _on_first_paint(self, _paint_s: float) -> None:
        self.timings["first_paint_s"] = time.perf_counter() - self._open_started
        self.first_painted.emit(self.timings["first_paint_s"])

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
        self._apply_theme(theme)

    def _apply_theme(self, theme: Theme) -> None:
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

    # ------------------------------------------------------------------ drag and drop
    def dragEnterEvent(self, ev: QDragEnterEvent) -> None:
        if ev.mimeData().hasUrls() and all(u.isLocalFile() for u in ev.mimeData().urls()):
            ev.acceptProposedAction()

    def dropEvent(self, ev: QDropEvent) -> None:
        paths = [Path(u.toLocalFile()) for u in ev.mimeData().urls() if u.isLocalFile()]
        target = self.path_for_drop(paths)
        if target is not None:
            ev.acceptProposedAction()
            self.open_path(target)

    def path_for_drop(self, paths: list[Path]) -> Path | None:
        """A folder, a single file, or several files (gathered as links in a temporary folder)."""
        if not paths:
            return None
        if len(paths) == 1:
            return paths[0]
        files = [p for p in paths if p.is_file() and p.name.lower().endswith(TRACE_SUFFIXES)]
        if not files:
            return paths[0]
        parents = {p.parent for p in files}
        if len(parents) == 1:
            folder = next(iter(parents))
            all_traces = {
                q for q in folder.iterdir() if q.is_file() and q.name.lower().endswith(TRACE_SUFFIXES)
            }
            if all_traces == set(files):
                return folder
        tmp = tempfile.TemporaryDirectory(prefix="lumos-drop-")
        self._drop_dirs.append(tmp)
        for f in files:
            (Path(tmp.name) / f.name).symlink_to(f.resolve())
        return Path(tmp.name)

    # ------------------------------------------------------------------ settings and shutdown
    def showEvent(self, ev: QShowEvent) -> None:
        super().showEvent(ev)
        if not self._docks_sized and not self._restored:
            self._docks_sized = True
            # dock sizes only stick once the window is laid out at its real size
            QTimer.singleShot(0, self._size_docks)

    def _size_docks(self) -> None:
        self.resizeDocks(
            [self.workbench.config_dock, self.summary_dock],
            [max(340, int(self.width() * 0.22)), max(420, int(self.width() * 0.27))],
            Qt.Orientation.Horizontal,
        )
        h_left = max(self.height() - 120, 400)
        self.resizeDocks(
            [self.workbench.config_dock, self.workbench.scenario_dock],
            [int(h_left * 0.68), int(h_left * 0.32)],
            Qt.Orientation.Vertical,
        )
        h = max(self.height() - 120, 400)
        self.resizeDocks(
            [self.summary_dock, self.details_dock], [int(h * 0.6), int(h * 0.4)], Qt.Orientation.Vertical
        )

    def _refresh_recent(self) -> None:
        paths = settings.recent_paths()
        self.recent_menu.clear()
        for p in paths:
            action = QAction(p, self)
            action.triggered.connect(partial(self.open_path, p))
            self.recent_menu.addAction(action)
        self.recent_menu.setEnabled(bool(paths))
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
        for task in list(self._tasks.values()):
            task.cancel()
        for token, task in list(self._tasks.items()):
            task.wait(timeout_ms)
            self._tasks.pop(token, None)
        QApplication.processEvents()
        for tmp in self._drop_dirs:
            tmp.cleanup()
        self._drop_dirs.clear()

    def closeEvent(self, ev: QCloseEvent) -> None:
        self.save_layout()
        self.shutdown()
        super().closeEvent(ev)
