"""Run a plain core function on a worker thread with progress, per-file status and cancel.

The function keeps the core's contract: ``fn(progress, on_file)`` where ``progress(fraction, msg)``
raises :class:`~lumos_core.errors.Cancelled` once :meth:`BackgroundTask.cancel` was called. The core
never sees Qt; this module is the only adapter. Signals are emitted from the worker thread and
delivered queued to receivers in the GUI thread. Whoever starts a task decides whether a result is
still wanted (the main window compares a job token), so a stale load can never replace a newer one.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from lumos_core.errors import Cancelled, LumosError

TaskFn = Callable[[Callable[[float, str], None], Callable[[str, str, str], None]], Any]

_PROGRESS_INTERVAL_S = 0.05  # at most 20 progress updates a second reach the GUI


class BackgroundTask(QObject):
    """One run of ``fn`` on its own QThread. Always call :meth:`wait` before dropping it."""

    # every signal carries the task's token first, so receivers can drop stale tasks' news
    progressed = Signal(int, float, str)
    file_status = Signal(int, str, str, str)  # token, file, state (cached/loaded/failed), detail
    succeeded = Signal(int, object)
    failed = Signal(int, str)
    cancelled = Signal(int)
    finished = Signal(int)

    def __init__(self, fn: TaskFn, token: int = 0, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.token = token
        self._fn = fn
        self._cancel = threading.Event()
        self._last_report = 0.0
        self._last_stage = ""
        self._thread = QThread()
        self._thread.setObjectName(f"lumos-task-{token}")
        self._worker = _Worker(self)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Ask the function to stop at its next progress report (cooperative, never terminate())."""
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def is_running(self) -> bool:
        return self._thread.isRunning()

    def wait(self, timeout_ms: int = 60_000) -> bool:
        """Block until the thread has finished (True) or the timeout passed (False)."""
        self._thread.quit()
        return bool(self._thread.wait(timeout_ms))

    # ---- called on the worker thread
    def _report(self, fraction: float, message: str) -> None:
        if self._cancel.is_set():
            raise Cancelled("cancelled by the user")
        now = time.monotonic()
        # a new stage ("compiling kernels…" after "summarising…") always gets through: it may be
        # what the next seconds are spent on; repeats of one stage ("parsing 12 of 256 files") are thinned
        stage = message.split(" ", 1)[0]
        if fraction >= 1.0 or now - self._last_report >= _PROGRESS_INTERVAL_S or stage != self._last_stage:
            self._last_report = now
            self._last_stage = stage
            self.progressed.emit(self.token, float(fraction), message)

    def _on_file(self, file: str, state: str, detail: str) -> None:
        self.file_status.emit(self.token, file, state, detail)
        if self._cancel.is_set():
            raise Cancelled("cancelled by the user")


class _Worker(QObject):
    def __init__(self, task: BackgroundTask) -> None:
        super().__init__()
        self._task = task

    @Slot()
    def run(self) -> None:
        task = self._task
        try:
            result = task._fn(task._report, task._on_file)
        except Cancelled:
            task.cancelled.emit(task.token)
        except LumosError as exc:
            task.failed.emit(task.token, str(exc))
        except Exception as exc:  # a bug: keep the traceback for the report, tell the user
            traceback.print_exc()
            task.failed.emit(
                task.token, f"{type(exc).__name__}: {exc} (this looks like a Lumos bug, please report it)"
            )
        else:
            if task.cancel_requested:
                task.cancelled.emit(task.token)
            else:
                task.succeeded.emit(task.token, result)
        finally:
            task.finished.emit(task.token)
            QThread.currentThread().quit()
