"""Searching the timeline: tasks whose name contains a text, highlighted in every rank, and
stepped through in time order (N / P).

:class:`TimelineSearch` is one part of :class:`~app.timeline.timeline_view.TimelineView`; the
highlight masks it hands the span item are kept (``match_masks``) so a relayout or a new
prediction layer keeps them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from app.loaded_job import LoadedJob
from app.timeline.hit import Hit
from app.timeline.span_item import TimelineItem


def no_matches() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)


class TimelineSearch:
    """Name search over every rank (see the module docstring)."""

    loaded: LoadedJob | None
    item: TimelineItem

    matches: tuple[np.ndarray, np.ndarray] = no_matches()  # rank indices, event indices; replaced
    match_index = -1
    match_masks: list[np.ndarray | None] = []  # per rank: which table rows match; replaced

    if TYPE_CHECKING:  # provided by the selection part of the view

        def select(self, hit: Hit | None, reveal: bool = False) -> None: ...

    def clear_search(self) -> None:
        """Forget the matches (a new job); the span item is told by the caller's new data."""
        self.matches = no_matches()
        self.match_index = -1
        self.match_masks = []

    def set_search(self, text: str) -> int:
        """Highlight tasks whose name contains ``text`` (case-insensitive); returns the count."""
        loaded = self.loaded
        self.match_index = -1
        if loaded is None or not text.strip():
            self.matches = no_matches()
            self.match_masks = []
            self.item.set_match_masks([None] * (len(loaded.tables) if loaded else 0))
            return 0
        needle = text.strip().lower()
        masks: list[np.ndarray | None] = []
        ranks_l, events_l, starts_l = [], [], []
        for ri, (t, table) in enumerate(zip(loaded.job.ranks, loaded.tables)):
            name_hit = np.fromiter((needle in s.lower() for s in t.strings), bool, len(t.strings))
            if not name_hit.any():
                masks.append(None)
                continue
            tmask = name_hit[t.name[table.event]]
            masks.append(tmask)
            ev = table.event[tmask].astype(np.int64)
            ranks_l.append(np.full(len(ev), ri, np.int64))
            events_l.append(ev)
            starts_l.append(t.start[ev])
        self.match_masks = masks
        self.item.set_match_masks(masks)
        if not events_l:
            self.matches = no_matches()
            return 0
        ranks = np.concatenate(ranks_l)
        events = np.concatenate(events_l)
        order = np.lexsort((ranks, np.concatenate(starts_l)))
        self.matches = (ranks[order], events[order])
        return len(events)

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
        self.select(hit, reveal=True)
        return hit
