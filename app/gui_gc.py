"""Python's cyclic garbage collector, run on the GUI thread only.

Automatic collection runs at an allocation on whatever thread allocates: a worker thread (an
estimate, a sweep, the loader's threads, Ray's) would then destroy the Qt objects that only a
reference cycle kept (a closed window's widgets and models, a replaced table model), concurrently
with the GUI thread using Qt, which Qt does not survive. Reproduced: a QSortFilterProxyModel freed
by the collector on another thread while the GUI thread processed events corrupted the heap, and
glibc aborted the process ("corrupted size vs. prev_size"). So while the GUI runs, automatic
collection is off and a timer on the GUI thread collects, generation by generation, with the same
thresholds (pyqtgraph's ``GarbageCollector`` does the same; this one can also be stopped).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer


class GuiThreadCollector(QObject):
    """Collect on the GUI thread every ``interval_ms`` (see the module docstring)."""

    def __init__(self, interval_ms: int = 500, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect)
        self._was_enabled = gc.isenabled()

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer.start()

    def stop(self) -> None:
        """Collect once more here and give collection back to Python (as it was before start)."""
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()

    def collect(self) -> None:
        """What automatic collection would have done by now: the generations over their threshold."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        generation = -1
        for g in range(3):
            if counts[g] > thresholds[g]:
                generation = g
        if generation >= 0:
            gc.collect(generation)
