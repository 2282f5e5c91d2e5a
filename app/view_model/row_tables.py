"""Every rank's row tables, built when their lanes are shown and kept within a memory budget.

A :class:`~app.view_model.lane_data.RowTable` costs a sort and a gathered copy of the rank's drawable
events (~1.5 ms and ~0.9 MB per rank of the 512-rank 175B job: 0.7-1.0 CPU s and 0.48 GB for all
of them), but a timeline shows a few dozen rows at a time and a grouped job only one rank per group.
:class:`RowTables` therefore starts with a :class:`RowShape` per rank: which (lane, depth) rows the
rank has and where its last event ends, what the lane layout and the time axis need, found with a
``bincount`` and no sort. A rank's table is built on the first request and cached:

* :meth:`RowTables.ready` (the painter): the table if it is built, else None (the rows stay empty
  until it is: the view asks a worker for it, see :mod:`app.timeline.row_table_loader`);
* ``tables[i]`` (selection, search stepping, tests): the table, built now if need be (one rank).

The cache is bounded (:data:`TABLE_BUDGET_BYTES` of table columns): scrolling through every rank of
a big job would otherwise end holding every table (0.48 GB at 512 ranks, ~4 GB at 4,096). When a
build goes over the budget, the tables used least recently are dropped, except those drawn in the
last :data:`KEEP_DRAWN_S` seconds (what is in view, and a screen around it, is drawn at every
repaint, so it never flickers back to "loading"). A dropped table is built again, identical, when
its lanes come back into view.

Building is thread-safe: a worker may build while the GUI thread reads; two builds of the same rank
keep the first. Nothing here knows Qt.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from app.view_model.lane_data import RowTable, build_row_table, drawable_events, empty_table
from lumos_core.trace.model import RankTrace

_NS_PER_MS = 1e6
TABLE_BUDGET_BYTES = 256 * 2**20  # built tables kept per RowTables (a job's, a prediction's)
KEEP_DRAWN_S = 2.0  # a table drawn this recently is never dropped, whatever the budget


@dataclass
class RowShape:
    """The rows a rank's table has, without the table: ``keys`` (lane, depth) in table order,
    ``depths`` (lane -> rows), ``n`` drawable events and ``end_ms``, the latest end among them."""

    keys: list[tuple[int, int]]
    depths: dict[int, int]
    n: int
    end_ms: float

    def __len__(self) -> int:
        return self.n


def row_shape(rank: RankTrace) -> RowShape:
    """The :class:`RowShape` of ``rank``: the keys and depths :func:`build_row_table` would give."""
    idx = drawable_events(rank)
    if not len(idx):
        return RowShape([], {}, 0, 0.0)
    lane = rank.lane[idx].astype(np.int64)
    depth = rank.depth[idx].astype(np.int64)
    n_depths = int(depth.max()) + 1
    if int(depth.min()) >= 0 and (int(lane.max()) + 1) * n_depths <= 1 << 24:
        codes = np.flatnonzero(np.bincount(lane * n_depths + depth))  # ascending = (lane, depth) order
        keys = [(int(c // n_depths), int(c % n_depths)) for c in codes]
    else:
        uniq = np.unique(lane * 65536 + depth)
        keys = [(int(k >> 16), int(k & 0xFFFF)) for k in uniq]
    depths: dict[int, int] = {}
    for ln, d in keys:
        depths[ln] = max(depths.get(ln, 0), d + 1)
    end = int((rank.start[idx] + rank.dur[idx]).max())
    return RowShape(keys, depths, len(idx), end / _NS_PER_MS)


class RowTables(Sequence[RowTable]):
    """The row tables of a job's ranks, built on demand (see the module docstring)."""

    def __init__(
        self,
        ranks: Sequence[RankTrace],
        families: Sequence[np.ndarray],
        shapes: list[RowShape] | None = None,
        present: Sequence[bool] | None = None,
        budget_bytes: int = TABLE_BUDGET_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``present``: ranks whose table is empty where False (a predicted job without them);
        ``budget_bytes``: the table columns kept built (see the module docstring); ``clock``: seconds,
        for what was drawn recently (the tests pass their own)."""
        self.ranks = ranks
        self.families = families
        self.present = present
        if shapes is None:
            shapes = [
                row_shape(r) if present is None or present[i] else RowShape([], {}, 0, 0.0)
                for i, r in enumerate(ranks)
            ]
        self.shapes = shapes
        self.budget_bytes = budget_bytes
        self.clock = clock
        # built tables, least recently used first; per rank, its size when built (its columns; the
        # zoom pyramids a paint may add later, only for rows of PYRAMID_MIN_EVENTS or more and only
        # at the zoom levels shown, are not counted) and when it was last used
        self._built: OrderedDict[int, RowTable] = OrderedDict()
        self._size: dict[int, int] = {}
        self._used: dict[int, float] = {}
        self._kept_bytes = 0
        self.n_dropped = 0  # tables dropped to stay within the budget (tests and benches)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.ranks)

    def __getitem__(self, i: int) -> RowTable:  # type: ignore[override]
        i = operator.index(i)  # one rank index (numpy integers too); iterate for all, which builds all
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.build(i % len(self))

    def __iter__(self) -> Iterator[RowTable]:  # builds every table: for small jobs and tests
        return (self.build(i) for i in range(len(self)))

    def ready(self, i: int) -> RowTable | None:
        """The table of rank ``i`` if it is built (never builds); counts as a use of it."""
        with self._lock:
            table = self._built.get(i)
            if table is not None:
                self._built.move_to_end(i)
                self._used[i] = self.clock()
            return table

    def shape(self, i: int) -> RowShape:
        return self.shapes[i]

    def build(self, i: int) -> RowTable:
        """The table of rank ``i``, built now if it is not yet (any thread)."""
        got = self.ready(i)
        if got is not None:
            return got
        if self.present is not None and not self.present[i]:
            table = empty_table()
        else:
            table = build_row_table(self.ranks[i], self.families[i])
        with self._lock:
            kept = self._built.get(i)
            if kept is not None:  # another thread built it meanwhile: keep the first
                return kept
            self._built[i] = table
            self._size[i] = table.nbytes
            self._used[i] = self.clock()
            self._kept_bytes += self._size[i]
            self._drop_over_budget()
            return table

    def drop(self, i: int) -> None:
        """Forget rank ``i``'s table (built again when next needed)."""
        with self._lock:
            if self._built.pop(i, None) is not None:
                self._kept_bytes -= self._size.pop(i)
                del self._used[i]

    def _drop_over_budget(self) -> None:
        """Drop the least recently used tables until the kept ones fit the budget, but none drawn in
        the last KEEP_DRAWN_S seconds (called with the lock held)."""
        if self._kept_bytes <= self.budget_bytes:
            return
        recent = self.clock() - KEEP_DRAWN_S
        while self._kept_bytes > self.budget_bytes and self._built:
            i = next(iter(self._built))  # the least recently used
            if self._used[i] > recent:
                break  # it and every later one were used recently: keep them all
            del self._built[i]
            del self._used[i]
            self._kept_bytes -= self._size.pop(i)
            self.n_dropped += 1

    def missing(self, indices: Sequence[int]) -> list[int]:
        """Those of ``indices`` whose tables are not built yet (in order, once each)."""
        seen: set[int] = set()
        out = []
        for i in indices:
            if 0 <= i < len(self) and i not in self._built and i not in seen:
                seen.add(i)
                out.append(i)
        return out

    @property
    def n_built(self) -> int:
        """Tables built and kept (dropped ones do not count)."""
        return len(self._built)

    @property
    def n_events(self) -> int:
        """Drawable events of every rank (built or not)."""
        return sum(s.n for s in self.shapes)

    @property
    def nbytes(self) -> int:
        """Bytes held by the tables kept (their columns and the zoom pyramids built so far)."""
        with self._lock:
            kept = list(self._built.values())
        return sum(t.nbytes for t in kept)


class JoinedTables(Sequence[RowTable]):
    """Two sequences of tables as one (e.g. the measured ranks, then predicted ones), keeping lazy
    parts lazy."""

    def __init__(self, *parts: Sequence[RowTable]) -> None:
        self.parts = parts

    def _locate(self, i: int) -> tuple[Sequence[RowTable], int]:
        for part in self.parts:
            if i < len(part):
                return part, i
            i -= len(part)
        raise IndexError(i)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __getitem__(self, i: int) -> RowTable:  # type: ignore[override]
        part, k = self._locate(i)
        return part[k]

    def ready(self, i: int) -> RowTable | None:
        part, k = self._locate(i)
        return ready_table(part, k)

    def shape(self, i: int) -> RowTable | RowShape:
        part, k = self._locate(i)
        return table_shape(part, k)

    def lazy_part(self, i: int) -> tuple[RowTables | None, int]:
        part, k = self._locate(i)
        if isinstance(part, JoinedTables):
            return part.lazy_part(k)
        return (part if isinstance(part, RowTables) else None), k


def ready_table(tables: Sequence[RowTable], i: int) -> RowTable | None:
    """Rank ``i``'s table if it can be drawn now: always for a plain list, when built for lazy ones."""
    if isinstance(tables, (RowTables, JoinedTables)):
        return tables.ready(i)
    return tables[i]


def table_shape(tables: Sequence[RowTable], i: int) -> RowTable | RowShape:
    """Something with rank ``i``'s ``keys`` and ``depths`` (the table, or its shape), never building."""
    if isinstance(tables, (RowTables, JoinedTables)):
        return tables.shape(i)
    return tables[i]


def lazy_source(tables: Sequence[RowTable], i: int) -> tuple[RowTables | None, int]:
    """The :class:`RowTables` that builds rank ``i``'s table and its index there (None for a list)."""
    if isinstance(tables, RowTables):
        return tables, i
    if isinstance(tables, JoinedTables):
        return tables.lazy_part(i)
    return None, i


def tables_end_ms(tables: Sequence[RowTable]) -> float:
    """The latest end of any drawable event (0 when none), without building a table."""
    if isinstance(tables, (RowTables, JoinedTables)):
        ends = [table_shape(tables, i) for i in range(len(tables))]
        return max((_end_of(s) for s in ends), default=0.0)
    return max((_end_of(t) for t in tables), default=0.0)


def _end_of(t: RowTable | RowShape) -> float:
    if isinstance(t, RowShape):
        return t.end_ms if t.n else 0.0
    return float(t.end.max()) if len(t) else 0.0


__all__ = [
    "KEEP_DRAWN_S",
    "TABLE_BUDGET_BYTES",
    "JoinedTables",
    "RowShape",
    "RowTables",
    "lazy_source",
    "ready_table",
    "row_shape",
    "table_shape",
    "tables_end_ms",
]
