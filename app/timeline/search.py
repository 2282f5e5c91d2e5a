"""Searching the timeline: tasks whose name contains a text, highlighted in every rank, and
stepped through in time order (N / P).

:class:`TimelineSearch` is one part owned by :class:`~app.timeline.timeline_view.TimelineView`;
stepping to a match emits :attr:`TimelineSearch.stepped` (the view selects it). The highlight
masks it hands the span item are kept (``match_masks``) so a relayout or a new prediction layer
keeps them.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QObject, Signal

from app.timeline.hit import Hit
from app.timeline.span_item import TimelineItem
from app.timeline.state import TimelineState
from app.view_model.lane_data import drawable_events
from app.view_model.row_tables import ready_table


def no_matches() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)


class TimelineSearch(QObject):
    """Name search over every rank (see the module docstring)."""

    stepped = Signal(object)  # the Hit stepped to: select it and bring it into view

    def __init__(self, state: TimelineState, item: TimelineItem, parent: QObject) -> None:
        super().__init__(parent)
        self.state = state
        self.item = item
        self.clear_search()

    def clear_search(self) -> None:
        """Forget the matches (a new job); the span item is told by the caller's new data."""
        self.matches: tuple[np.ndarray, np.ndarray] = no_matches()  # rank indices, event indices
        self.match_index = -1
        self.match_masks: list[np.ndarray | None] = []  # per rank: which table rows match; replaced
        self.event_masks: list[np.ndarray | None] = []  # per rank: which events match (built or not)

    def set_search(self, text: str) -> int:
        """Highlight tasks whose name contains ``text`` (case-insensitive); returns the count."""
        loaded = self.state.loaded
        self.match_index = -1
        self.event_masks = []
        if loaded is None or not text.strip():
            self.matches = no_matches()
            self.match_masks = []
            self.item.set_match_masks([None] * (len(loaded.job.ranks) if loaded else 0))
            return 0
        needle = text.strip().lower()
        event_masks: list[np.ndarray | None] = []
        ranks_l, events_l, starts_l, rows_l = [], [], [], []
        for ri, t in enumerate(loaded.job.ranks):
            name_hit = np.fromiter((needle in s.lower() for s in t.strings), bool, len(t.strings))
            if not name_hit.any():
                event_masks.append(None)
                continue
            drawn = drawable_events(t)  # what the rank's row table holds, built or not
            ev = drawn[name_hit[t.name[drawn]]].astype(np.int64)
            emask = np.zeros(len(t.start), bool)
            emask[ev] = True
            event_masks.append(emask)
            ranks_l.append(np.full(len(ev), ri, np.int64))
            events_l.append(ev)
            starts_l.append(t.start[ev])
            rows_l.append(t.lane[ev].astype(np.int64) * 65536 + t.depth[ev])
        self.event_masks = event_masks
        self.match_masks = [None] * len(event_masks)
        self.fill_match_masks()
        if not events_l:
            self.matches = no_matches()
            return 0
        ranks = np.concatenate(ranks_l)
        events = np.concatenate(events_l)
        # by start, then rank, then row: the order of the row tables' rows (ties: event order)
        order = np.lexsort((np.concatenate(rows_l), ranks, np.concatenate(starts_l)))
        self.matches = (ranks[order], events[order])
        return len(events)

    def fill_match_masks(self) -> None:
        """The highlight masks (over table rows) of the ranks whose tables are built: at a search,
        and again whenever more tables are built."""
        loaded = self.state.loaded
        if loaded is None or not self.event_masks:
            return
        changed = False
        for ri, emask in enumerate(self.event_masks):
            if emask is None or ri >= len(self.match_masks) or self.match_masks[ri] is not None:
                continue
            table = ready_table(loaded.tables, ri)
            if table is not None:
                self.match_masks[ri] = emask[table.event]
                changed = True
        if changed or not any(m is not None for m in self.match_masks):
            self.item.set_match_masks(self.match_masks)

    def reapply(self) -> None:
        """New layers in the span item: give it the highlight masks again."""
        if self.match_masks:
            self.item.set_match_masks(self.match_masks)

    @property
    def match_count(self) -> int:
        return len(self.matches[0])

    def step_match(self, delta: int) -> Hit | None:
        n = self.match_count
        if n == 0:
            return None
        self.match_index = (
            (self.match_index + delta) % n if self.match_index >= 0 else (0 if delta > 0 else n - 1)
        )
        hit = Hit(int(self.matches[0][self.match_index]), int(self.matches[1][self.match_index]))
        self.stepped.emit(hit)
        return hit
