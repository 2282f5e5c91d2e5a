"""Opening jobs in the main window: a folder, a file, dropped files, a recent path or the demo job,
each loaded on a :class:`~app.jobs.BackgroundTask` with progress, cancel and per-file status.

A load has two steps, each on its own task: the lanes (:func:`~app.view_model.loaded_job.prepare_lanes`),
shown as soon as they are ready, then the summaries (:func:`~app.view_model.loaded_job.summarise_job`),
started once the lanes are painted so they do not compete with the first paint; ``job_loaded`` is
emitted when both are in. :class:`JobOpening` is a part the main window owns: built with the window
(dialogs' parent, drag and drop), the panes it reports into and the status bar's widgets, it says
what it has through signals; the window shows the job.
Each load gets a new token; news from any other token is ignored, so opening B while A is still
loading can never show A. A folder dropped with Shift held (or on the Diff pane) while a job is
open is compared with it instead of opened.
"""

from __future__ import annotations

import html
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QDockWidget, QFileDialog, QMainWindow

from app import settings
from app.demo_source import DEMO_UNAVAILABLE, demo_generator
from app.jobs import BackgroundTask
from app.panels.summary_panes import SummaryPanes
from app.timeline.timeline_view import TimelineView
from app.view_model.loaded_job import JobSummaries, LoadedJob, prepare_lanes, summarise_job
from app.window_chrome import Banner
from app.window_menus import WindowStatus
from lumos_core.api.loading import TRACE_SUFFIXES

DROP_HINT = "Drop to open this job; hold Shift (or drop on the Diff pane) to compare it with the open one"


def error_html(message: str) -> str:
    """``message`` as the banner's rich text: <, > and & escaped, quotes left alone (the label shows
    text without a tag as plain text, where an escaped quote reads "&#x27;"), inside a tag so the
    label always reads it as rich text."""
    return f"<span>{html.escape(message, quote=False)}</span>"


def load_eta(fraction: float, elapsed_s: float) -> str:
    """ " · about 40 s left" once a load is far enough along for the estimate to mean something."""
    if not (0.03 < fraction < 0.98) or elapsed_s < 1.0:
        return ""
    left = elapsed_s * (1 - fraction) / fraction
    return f" · about {left:.0f} s left" if left < 120 else f" · about {left / 60:.0f} min left"


class JobOpening(QObject):
    """Starting, following and cancelling loads; drag and drop (see the module docstring)."""

    lanes_loaded = Signal(object)  # LoadedJob: its lanes are ready to show
    summarised = Signal(object)  # LoadedJob: its summaries are in too
    job_loaded = Signal(object)  # LoadedJob, after ``summarised`` is handled
    load_failed = Signal(str)
    load_cancelled = Signal()
    recent_changed = Signal()  # a path was remembered in the recent list
    waiting = Signal(str)  # what the job's panes wait for while it is read
    compare_requested = Signal(object)  # Path dropped to be compared with the open job

    # the summaries start at the first paint of the lanes, or after this long if no paint comes
    # (a hidden or minimised window)
    SUMMARY_START_MS = 300

    def __init__(
        self, window: QMainWindow, summaries: SummaryPanes, banner: Banner, status: WindowStatus
    ) -> None:
        super().__init__(window)
        self.window = window
        self.summaries = summaries
        self.banner = banner
        self.status = status
        self.loading_path: str | None = None
        self.last_error: str | None = None
        self.has_job: Callable[[], bool] = lambda: False  # the window says whether a job is shown
        self.diff_dock: QDockWidget | None = None  # a drop on it compares instead of opening
        self._token = 0
        self._open_started = 0.0
        self._task_serial = 0
        self.timings: dict[str, float] = {}
        self._tasks: dict[int, BackgroundTask] = {}  # by serial number; task.token is the job's
        self._drop_dirs: list[tempfile.TemporaryDirectory[str]] = []
        self._awaiting_summary: tuple[int, LoadedJob] | None = None
        self._closed = False  # after stop_loads (the window closes) nothing starts again
        self._summary_timer = QTimer(self)
        self._summary_timer.setSingleShot(True)
        self._summary_timer.timeout.connect(self.start_summaries)
        status.cancel_button.clicked.connect(self.cancel_load)

    # ------------------------------------------------------------------ asking
    def ask_open_folder(self) -> None:
        start = (settings.recent_paths() or [str(Path.home())])[0]
        path = QFileDialog.getExistingDirectory(self.window, "Open trace folder", start)
        if path:
            self.open_path(path)

    def ask_open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window,
            "Open trace file",
            str(Path.home()),
            "Kineto traces (*.json *.json.gz);;All files (*)",
        )
        if path:
            self.open_path(path)

    # ------------------------------------------------------------------ starting
    def open_path(self, path: str | Path) -> int:
        """Start loading ``path`` (folder or file) in the background; returns the job token."""
        path = str(path)
        return self._start(partial(prepare_lanes, path), path, f"Opening {path}…")

    def open_demo(self) -> int:
        make = demo_generator()
        if make is None:
            self.show_error(DEMO_UNAVAILABLE)
            return -1

        def load_demo(
            progress: Callable[[float, str], None], on_file: Callable[[str, str, str], None]
        ) -> LoadedJob:
            folder = make(lambda f, m: progress(0.3 * f, f"generating the demo job: {m}"))
            lj = prepare_lanes(str(folder), lambda f, m: progress(0.3 + 0.7 * f, m), on_file)
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
        self._awaiting_summary = None
        self._summary_timer.stop()
        self._start_task(fn, token, self._on_loaded)
        self.summaries.start_load()
        self.summaries.setCurrentWidget(self.summaries.files_tab)  # per-file status while loading
        self.banner.hide()
        self.status.status_label.setText(message)
        self.status.progress.setValue(0)
        self.status.progress.show()
        self.status.cancel_button.show()
        self.status.cancel_button.setEnabled(True)
        return token

    def _start_task(self, fn: Callable[..., object], token: int, on_success: Callable[..., None]) -> None:
        task = BackgroundTask(fn, token)
        task.progressed.connect(self._on_progress)
        task.file_status.connect(self._on_file_status)
        task.succeeded.connect(on_success)
        task.failed.connect(self._on_failed)
        task.cancelled.connect(self._on_cancelled)
        self._task_serial += 1
        task.finished.connect(partial(self._on_task_finished, self._task_serial))
        self._tasks[self._task_serial] = task
        task.start()

    def start_summaries(self) -> None:
        """Summarise the job whose lanes are shown (once: at its first paint or SUMMARY_START_MS)."""
        self._summary_timer.stop()
        pending, self._awaiting_summary = self._awaiting_summary, None
        if pending is None or pending[0] != self._token:
            return
        token, loaded = pending
        self._start_task(
            lambda progress, _on_file: summarise_job(loaded, progress),
            token,
            partial(self._on_summarised, loaded),
        )

    def cancel_load(self) -> None:
        tasks = [t for t in self._tasks.values() if t.token == self._token]
        if self._awaiting_summary is not None:  # lanes shown, summaries not started: never start them
            self._awaiting_summary = None
            self._summary_timer.stop()
            self.status.status_label.setText("Loading cancelled (summaries not computed).")
            self._loading_done(self._token)
            self.load_cancelled.emit()
        for task in tasks:
            task.cancel()
            self.status.cancel_button.setEnabled(False)
            self.status.status_label.setText("Cancelling…")

    @property
    def token(self) -> int:
        """The newest load's token: news carrying any other is stale."""
        return self._token

    @property
    def is_loading(self) -> bool:
        """A load of the newest job is running (its lanes or its summaries)."""
        return self._awaiting_summary is not None or any(t.token == self._token for t in self._tasks.values())

    def seconds_since_open(self) -> float:
        """Seconds since the newest open request."""
        return time.perf_counter() - self._open_started

    def show_error(self, message: str) -> None:
        """Say in the banner and the status bar that something could not be opened."""
        self.last_error = message
        self.banner.show_message(error_html(message), error=True)
        self.status.status_label.setText("Loading failed.")

    def stop_loads(self, timeout_ms: int) -> None:
        """Cancel and wait for every load and the timelines' row-table workers (the window closes).
        Nothing starts after it (a result still queued would start summaries, then a replay)."""
        self._closed = True
        self._awaiting_summary = None
        self._summary_timer.stop()
        for task in list(self._tasks.values()):
            task.cancel()
        for serial, task in list(self._tasks.items()):
            task.wait(timeout_ms)
            self._tasks.pop(serial, None)
        for view in self.window.findChildren(TimelineView):
            view.shutdown(timeout_ms)

    def remove_drop_folders(self) -> None:
        """Remove the folders made for dropped files (their links only; the traces stay)."""
        for tmp in self._drop_dirs:
            tmp.cleanup()
        self._drop_dirs.clear()

    # ---- task news (GUI thread)
    def _on_progress(self, token: int, fraction: float, message: str) -> None:
        if token != self._token:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        self.status.progress.setValue(int(1000 * fraction))
        text = f"{message}{load_eta(fraction, self.seconds_since_open())}"
        self.status.status_label.setText(text)
        self.timings.setdefault("first_progress_s", self.seconds_since_open())
        if self._awaiting_summary is None:  # still reading: say what the panes wait for
            short = " · ".join(p for p in text.split(" · ") if not p.lower().endswith(TRACE_SUFFIXES))
            self.waiting.emit(f"Waiting for the job: {short}")  # the file name is for the status bar

    def _on_file_status(self, token: int, file: str, state: str, detail: str) -> None:
        if token == self._token:
            self.summaries.set_file_status(file, state, detail)

    def _on_loaded(self, token: int, loaded: LoadedJob) -> None:
        if token != self._token or self._closed:
            return  # a newer load was started: this result is stale
        self.timings["load_s"] = self.seconds_since_open()
        self.lanes_loaded.emit(loaded)
        if loaded.path and self.loading_path != "demo":
            settings.remember_path(loaded.path)
            self.recent_changed.emit()
        self.status.status_label.setText("Summarising…")
        self._awaiting_summary = (token, loaded)
        self._summary_timer.start(self.SUMMARY_START_MS)

    def lanes_painted(self) -> None:
        """The lanes of the newest job were painted: its summaries may start."""
        if self._awaiting_summary is not None:
            QTimer.singleShot(0, self.start_summaries)  # after this paint has returned

    def _on_summarised(self, loaded: LoadedJob, token: int, summaries: JobSummaries) -> None:
        if token != self._token or self._closed:
            return  # stale
        loaded.apply(summaries)
        self.timings["summaries_s"] = self.seconds_since_open()
        self.summarised.emit(loaded)
        self.job_loaded.emit(loaded)

    def _on_failed(self, token: int, message: str) -> None:
        if token != self._token:
            return
        self.show_error(f"Could not open {self.loading_path}: {message}")
        self.summaries.set_load_error(message)
        self.load_failed.emit(message)

    def _on_cancelled(self, token: int) -> None:
        if token != self._token:
            return
        self.status.status_label.setText("Loading cancelled.")
        self.load_cancelled.emit()

    def _on_task_finished(self, serial: int, token: int) -> None:
        task = self._tasks.pop(serial, None)
        if task is not None:
            task.wait()
            task.deleteLater()
        if not self.is_loading:
            self._loading_done(token)

    def _loading_done(self, token: int) -> None:
        if token == self._token:
            self.status.progress.hide()
            self.status.cancel_button.hide()

    # ------------------------------------------------------------------ drag and drop
    def drag_enter(self, ev: QDragEnterEvent) -> None:
        if ev.mimeData().hasUrls() and all(u.isLocalFile() for u in ev.mimeData().urls()):
            ev.acceptProposedAction()
            if self.has_job():
                self.window.statusBar().showMessage(DROP_HINT, 4000)

    def drop(self, ev: QDropEvent) -> None:
        paths = [Path(u.toLocalFile()) for u in ev.mimeData().urls() if u.isLocalFile()]
        target = self.path_for_drop(paths)
        if target is None:
            return
        ev.acceptProposedAction()
        shift = bool(ev.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        if self.drop_compares(shift, ev.position().toPoint()):
            self.compare_requested.emit(target)
        else:
            self.open_path(target)

    def drop_compares(self, shift: bool, pos: QPoint) -> bool:
        """A drop compares the dropped job with the open one (File ▸ Compare with Measured Job)
        when Shift is held or it lands on the Diff pane; otherwise it opens the job."""
        if not self.has_job():
            return False
        dock = self.diff_dock
        on_diff = (
            dock is not None and dock.isVisible() and dock.rect().contains(dock.mapFrom(self.window, pos))
        )
        return shift or on_diff

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
