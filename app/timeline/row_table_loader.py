"""Building the row tables of lanes that come into view, on a worker thread, a few ranks at a time.

The painter draws the rows whose tables are built and reports the others
(:attr:`~app.timeline.span_item.TimelineItem.sigTablesMissing`: those in view first, then those a
screen away). :class:`RowTableLoader` builds them on a :class:`~app.jobs.BackgroundTask` in batches
of :data:`BATCH` ranks (a few ms each), and says ``built`` after each batch so the view repaints.
Every new report *replaces* what is still waiting (the view moved: what was wanted a scroll ago may
no longer be), the batch in flight finishes, and :meth:`RowTableLoader.forget` (a new job) cancels
it and drops whatever it would still report.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QObject, Signal

from app.jobs import BackgroundTask
from app.view_model.lane_data import RowTable
from app.view_model.row_tables import RowTables, lazy_source

BATCH = 8  # ranks per worker batch: ~15 ms at 512 ranks, so what is in view arrives soon


class RowTableLoader(QObject):
    """Builds missing row tables off the GUI thread (see the module docstring)."""

    built = Signal()  # a batch of tables was built for the current job: repaint

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._token = 0
        self._waiting: list[tuple[RowTables, int]] = []
        self._task: BackgroundTask | None = None
        self._done_tasks: list[BackgroundTask] = []
        self.n_batches = 0  # batches built for any job (tests and benches)
        self._closed = False  # after shutdown nothing starts again

    def request(self, layers_tables: Sequence[Sequence[RowTable]], missing: list[tuple[int, int]]) -> None:
        """``missing``: (layer, rank index) pairs as the painter reported them, most wanted first;
        ``layers_tables``: each layer's tables."""
        if self._closed:
            return
        waiting: list[tuple[RowTables, int]] = []
        seen: set[tuple[int, int]] = set()
        for li, ri in missing:
            if not 0 <= li < len(layers_tables):
                continue
            lazy, k = lazy_source(layers_tables[li], ri)
            if lazy is None or lazy.ready(k) is not None or (id(lazy), k) in seen:
                continue
            seen.add((id(lazy), k))
            waiting.append((lazy, k))
        self._waiting = waiting
        self._start_next()

    def forget(self) -> None:
        """A new job (or none): drop what waits, cancel what runs; its news is ignored."""
        self._token += 1
        self._waiting = []
        if self._task is not None:
            self._task.cancel()

    @property
    def busy(self) -> bool:
        return self._task is not None or bool(self._waiting)

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Cancel and wait for the worker (before the view goes away); nothing starts after it."""
        self._closed = True
        self.forget()
        for task in [*self._done_tasks, *([self._task] if self._task is not None else [])]:
            task.wait(timeout_ms)
        self._done_tasks = []
        self._task = None

    # ---- internals
    def _start_next(self) -> None:
        self._reap()
        if self._task is not None or self._closed:
            return  # the batch in flight finishes first; then what waits by then
        batch = [(t, k) for t, k in self._waiting if t.ready(k) is None][:BATCH]
        self._waiting = [(t, k) for t, k in self._waiting if (t, k) not in batch]
        if not batch:
            self._waiting = []
            return

        def work(progress, _on_file):  # type: ignore[no-untyped-def]
            for j, (tables, k) in enumerate(batch):
                progress(j / len(batch), "arranging lanes")
                tables.build(k)
            return len(batch)

        task = BackgroundTask(work, self._token)
        task.succeeded.connect(self._on_built)
        task.finished.connect(self._on_finished)
        self._task = task
        task.start()

    def _on_built(self, token: int, _n: object) -> None:
        if token == self._token:
            self.n_batches += 1
            self.built.emit()

    def _on_finished(self, _token: int) -> None:
        if self._task is not None:
            self._done_tasks.append(self._task)
        self._task = None
        self._start_next()

    def _reap(self) -> None:
        """Drop finished tasks (their threads end right after ``finished``)."""
        keep = []
        for task in self._done_tasks:
            if task.is_running():
                keep.append(task)
            else:
                task.wait(1000)
        self._done_tasks = keep


__all__ = ["BATCH", "RowTableLoader"]
