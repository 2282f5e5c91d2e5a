"""Run a plain core function on a worker thread with progress, per-file status and cancel.

The function keeps the core's contract: ``fn(progress, on_file)`` where ``progress(fraction, msg)``
raises :class:`~lumos_core.errors.Cancelled` once :meth:`BackgroundTask.cancel` was called. The core
never sees Qt; this module is the only adapter. Signals are emitted from the worker thread and
delivered queued to receivers in the GUI thread. Whoever starts a task decides whether a result is
still wanted (the main window compares a job token), so a stale load can never replace a newer one.

Lifetimes. The part that starts a task owns it: it cancels and waits for it when it closes. Beyond
that, a started task stays in a module-level set until its thread has been joined, so whether a
running thread's objects stay alive never depends on its owner, nor on when (or on which thread)
Python's cyclic garbage collector runs: ``QThread::~QThread`` on a running thread is a ``qFatal``
that aborts the process. The worker drops its reference to the task when its function returns, so
a finished task is freed by reference counting, on the thread that drops it, instead of waiting in
a task <-> worker cycle for the collector. :func:`running_tasks` lists what still runs (the app
tests check that nothing does once their windows are closed).
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

# Started tasks whose thread has not been joined yet (see the module docstring): this strong
# reference is what keeps a running thread's objects alive, whatever happens to their owner.
_STARTED: set[BackgroundTask] = set()


def running_tasks() -> list[BackgroundTask]:
    """Tasks whose thread still runs (started, not yet finished), oldest first."""
    return sorted((t for t in _STARTED if t.is_running()), key=lambda t: t.serial)


_serial = 0


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
        global _serial
        _serial += 1
        self.serial = _serial  # creation order, for running_tasks()
        self.token = token
        self.what = getattr(fn, "__qualname__", type(fn).__name__)  # named in leak reports
        self._fn = fn
        self._cancel = threading.Event()
        self._last_report = 0.0
        self._last_stage = ""
        self._thread = QThread()
        self._thread.setObjectName(f"lumos-task-{token}")
        self._worker = _Worker(self)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)
        # delivered on the GUI thread (this object's) once the thread is about to end
        self._thread.finished.connect(self._on_thread_finished)

    def start(self) -> None:
        _STARTED.add(self)
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
        done = bool(self._thread.wait(timeout_ms))
        if done:
            _STARTED.discard(self)
        return done

    @Slot()
    def _on_thread_finished(self) -> None:
        # the owner may never call wait() (e.g. it was closed without stopping its work): the
        # thread is joined here, on the GUI thread, before the last strong reference goes
        if self._thread.wait(10_000):
            _STARTED.discard(self)

    def __repr__(self) -> str:
        try:
            state = "running" if self.is_running() else "finished"
            name = self._thread.objectName()
        except RuntimeError:  # the C++ thread is gone
            state, name = "deleted", f"lumos-task-{self.token}"
        return f"<BackgroundTask {name} ({self.what}), {state}>"

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
            self._task = None  # no task <-> worker cycle once the work is done
            QThread.currentThread().quit()
