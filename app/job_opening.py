"""Opening jobs in the main window: a folder, a file, dropped files, a recent path or the demo job,
each loaded on a :class:`~app.jobs.BackgroundTask` with progress, cancel and per-file status.

:class:`JobOpening` is one part of :class:`~app.main_window.MainWindow`. Each load gets a new token;
news from any other token is ignored, so opening B while A is still loading can never show A.
"""

from __future__ import annotations

import html
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QLabel, QProgressBar, QPushButton

from app import settings
from app.demo_source import DEMO_UNAVAILABLE, demo_generator
from app.jobs import BackgroundTask
from app.loaded_job import LoadedJob, prepare_job
from app.panels.summary_panes import SummaryPanes
from app.window_chrome import Banner
from lumos_core.trace.loader import TRACE_SUFFIXES


class JobOpening:
    """Starting, following and cancelling loads; drag and drop (see the module docstring)."""

    summaries: SummaryPanes
    banner: Banner
    status_label: QLabel
    progress: QProgressBar
    cancel_button: QPushButton
    job_loaded: Signal
    load_failed: Signal
    load_cancelled: Signal

    loading_path: str | None = None
    last_error: str | None = None
    _token = 0
    _open_started = 0.0

    if TYPE_CHECKING:  # provided by the main window

        def set_loaded(self, loaded: LoadedJob) -> None: ...
        def refresh_recent(self) -> None: ...

    def init_job_opening(self) -> None:
        self.timings: dict[str, float] = {}
        self._tasks: dict[int, BackgroundTask] = {}
        self._drop_dirs: list[tempfile.TemporaryDirectory[str]] = []

    # ------------------------------------------------------------------ asking
    def ask_open_folder(self) -> None:
        start = (settings.recent_paths() or [str(Path.home())])[0]
        path = QFileDialog.getExistingDirectory(self, "Open trace folder", start)  # type: ignore[arg-type]
        if path:
            self.open_path(path)

    def ask_open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,  # type: ignore[arg-type]
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
        return self._start(partial(prepare_job, path), path, f"Opening {path}…")

    def open_demo(self) -> int:
        make = demo_generator()
        if make is None:
            self.show_error(DEMO_UNAVAILABLE)
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

    def seconds_since_open(self) -> float:
        """Seconds since the newest open request."""
        return time.perf_counter() - self._open_started

    def show_error(self, message: str) -> None:
        """Say in the banner and the status bar that something could not be opened."""
        self.last_error = message
        self.banner.show_message(html.escape(message), error=True)
        self.status_label.setText("Loading failed.")

    def stop_loads(self, timeout_ms: int) -> None:
        """Cancel and wait for every load."""
        for task in list(self._tasks.values()):
            task.cancel()
        for token, task in list(self._tasks.items()):
            task.wait(timeout_ms)
            self._tasks.pop(token, None)

    def remove_drop_folders(self) -> None:
        """Remove the folders made for dropped files (their links only; the traces stay)."""
        for tmp in self._drop_dirs:
            tmp.cleanup()
        self._drop_dirs.clear()

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
        self.timings["load_s"] = self.seconds_since_open()
        self.set_loaded(loaded)
        if loaded.path and self.loading_path != "demo":
            settings.remember_path(loaded.path)
            self.refresh_recent()
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
