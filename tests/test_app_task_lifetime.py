"""Lifetimes of the background tasks (app/jobs.py): a started task stays alive until its thread has
been joined, whatever happens to its owner, and a finished one is freed by reference counting (no
task <-> worker cycle left for Python's cyclic collector, which may run at any allocation on any
thread). A window dropped in the middle of a sweep, collected, leaves no thread behind; the app
tests check at the end of each module that no task still runs (app_fixtures)."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
import weakref

import pytest
from app_helpers import make_window, open_in_window
from conftest import needs_shared, shared
from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QApplication

from app.jobs import BackgroundTask, running_tasks

pytest_plugins = ["app_fixtures"]  # isolated QSettings, the end-of-module check for running tasks


def process_events_until(done, timeout_s: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while not done() and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)
    return bool(done())


def test_a_finished_task_is_freed_without_the_cycle_collector(qapp) -> None:  # type: ignore[no-untyped-def]
    task = BackgroundTask(lambda p, f: 42, token=11)
    thread = weakref.ref(task._thread)
    gone = weakref.ref(task)
    was_enabled = gc.isenabled()
    gc.disable()  # only reference counting from here: a cycle would keep both alive
    try:
        task.start()
        assert task.wait(10_000)
        del task
        QApplication.processEvents()
        assert gone() is None and thread() is None
    finally:
        if was_enabled:
            gc.enable()


class _Owner(QObject):
    """An owner that forgets to wait: it and its task only reachable through a cycle."""

    def __init__(self, task: BackgroundTask) -> None:
        super().__init__()
        self.task = task
        task.owner = self  # type: ignore[attr-defined]


def test_a_running_task_outlives_its_dropped_owner_until_its_thread_ends(qapp) -> None:  # type: ignore[no-untyped-def]
    go = threading.Event()
    task = BackgroundTask(lambda p, f: go.wait(10), token=12)
    gone = weakref.ref(task)
    owner = _Owner(task)
    task.start()
    del task, owner
    gc.collect()  # the owner's cycle goes; the task must not
    assert [t.token for t in running_tasks()] == [12]
    go.set()
    assert process_events_until(lambda: not running_tasks())
    QApplication.processEvents()
    gc.collect()
    assert gone() is None  # joined on the GUI thread, then released


@needs_shared
def test_a_window_dropped_mid_sweep_leaves_no_thread_behind(qapp) -> None:  # type: ignore[no-untyped-def]
    """The worst case for lifetimes: the window goes (deleted, its Python side collected) while its
    sweep runs, without being shut down. The sweep's thread must neither be destroyed running
    (qFatal) nor outlive its work, and its worker processes end; what it drives is gone, so its
    rows are dropped. (The task object itself may stay: PySide keeps the lambdas connected to it,
    which hold the deleted dialog's Python side, until the task's C++ object is deleted.)"""
    w = open_in_window(qapp, shared("h100-nanogpt-8rank"))
    d = w.workbench.grid_sweep
    d.set_grid_text({"dp": "8, 16"})
    d.engine_combo.setCurrentIndex(d.engine_combo.findData("local"))
    d.workers.setValue(2)
    assert d.run()
    assert process_events_until(lambda: bool(multiprocessing.active_children()), 60)
    task = weakref.ref(d.task)
    w.deleteLater()  # no closeEvent: nothing is shut down
    del w, d
    QApplication.processEvents()
    gc.collect()
    assert task() is not None and task() in running_tasks()
    assert process_events_until(lambda: not running_tasks(), 120), running_tasks()
    gc.collect()
    assert task() is None or not task().is_running()
    assert process_events_until(
        lambda: not [p for p in multiprocessing.active_children() if p.is_alive()], 30
    )


@needs_shared
def test_a_window_closed_with_its_load_result_still_queued_starts_nothing_after(qapp, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The load finished, its result waits in the event queue, the window closes: delivered during
    the close, the result used to show the lanes, arm the summaries' timer and (through the
    window) start the baseline replay, on threads nobody waited for any more; in the tests such a
    closed window (deleteLater is not processed outside an event loop) kept starting work in the
    next test, referenced only by its own garbage."""
    started: list[str] = []
    original = BackgroundTask.start

    def start(task: BackgroundTask) -> None:
        started.append(task.what)
        original(task)

    monkeypatch.setattr(BackgroundTask, "start", start)
    w = make_window()
    w.open_path(shared("h100-nanogpt-8rank"))
    loads = running_tasks()  # the load
    end = time.monotonic() + 90
    while any(t.is_running() for t in loads) and time.monotonic() < end:
        time.sleep(0.01)  # no event processing: the load's result stays queued
    assert len(started) == 1
    w.close()  # closeEvent: shutdown
    process_events_until(lambda: False, 1.0)  # past the summaries' 300 ms timer
    assert started[1:] == [] and not running_tasks()
    w.deleteLater()


def test_cyclic_garbage_holding_qt_objects_is_collected_on_the_gui_thread(qapp) -> None:  # type: ignore[no-untyped-def]
    """Automatic collection runs on whichever thread allocates: a worker would destroy Qt objects
    that only a cycle held (a closed window's models) while the GUI thread uses Qt; the process
    then dies of a corrupted heap (reproduced with a QSortFilterProxyModel). While app tests run,
    as in the app, collection happens on the GUI thread (app/gui_gc.py, app_fixtures)."""
    where: list[str] = []
    model = QStandardItemModel()
    model.destroyed.connect(
        lambda: where.append(threading.current_thread().name), Qt.ConnectionType.DirectConnection
    )
    holder: dict = {"model": model}
    holder["self"] = holder  # only the cycle keeps the model
    del model, holder

    kept: list = []

    def allocate() -> None:  # what a worker does: allocate (past the collection threshold)
        kept.append([[] for _ in range(20_000)])

    worker = threading.Thread(target=allocate, name="worker")
    worker.start()
    worker.join()
    assert where == []  # the worker collected nothing
    assert process_events_until(lambda: bool(where), 5.0)
    assert where == ["MainThread"]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
