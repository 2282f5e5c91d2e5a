"""Row tables on demand: a paint that finds lanes without their row tables asks for them, and
:class:`~app.timeline.row_table_loader.RowTableLoader` builds them on a worker; :attr:`TableFeed.built`
says when more are ready (repaint, highlight the search's matches in them).

:class:`TableFeed` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication

from app.timeline.canvas import TimelineCanvas
from app.timeline.overview import OverviewStrip
from app.timeline.row_table_loader import RowTableLoader
from app.timeline.span_item import TimelineItem


class TableFeed(QObject):
    """Asks for the row tables a paint lacked (see the module docstring)."""

    built = Signal()  # a batch of row tables is ready

    def __init__(self, item: TimelineItem, canvas: TimelineCanvas, overview: OverviewStrip) -> None:
        super().__init__(canvas)
        self.item = item
        self.canvas = canvas
        self.overview = overview
        self.row_loader = RowTableLoader(self)
        self._missing: list[tuple[int, int]] = []
        self._ask_timer = QTimer(self)
        self._ask_timer.setSingleShot(True)
        self._ask_timer.setInterval(0)  # after the paint that found them, never inside it
        self._ask_timer.timeout.connect(self._ask_for_tables)
        item.sigTablesMissing.connect(self._on_tables_missing)
        self.row_loader.built.connect(self.built)

    def forget(self) -> None:
        """A new job: drop what was asked for the old one."""
        self.row_loader.forget()
        self._missing = []

    def shutdown(self, timeout_ms: int) -> None:
        self._ask_timer.stop()
        self.row_loader.shutdown(timeout_ms)

    @property
    def tables_pending(self) -> bool:
        """Row tables were asked for and are not all built yet."""
        return self._ask_timer.isActive() or self.row_loader.busy

    def wait_drawn(self, timeout_s: float = 30.0) -> bool:
        """Process events until every row in view is drawn with its table and the overview is
        binned (for offscreen grabs: screenshots, tests); False if that took over ``timeout_s``."""
        end = time.monotonic() + timeout_s
        self.canvas.grab()  # a paint reports the tables it lacks
        while time.monotonic() < end:
            QApplication.processEvents()
            if self.tables_pending or self.overview.binning:
                time.sleep(0.005)
                continue
            self.canvas.grab()
            if not self.item.last_missing and not self.tables_pending:
                return True
        return False

    def _on_tables_missing(self, missing: list[tuple[int, int]]) -> None:
        self._missing = missing
        self._ask_timer.start()

    def _ask_for_tables(self) -> None:
        self.row_loader.request([layer.tables for layer in self.item.layers], self._missing)
