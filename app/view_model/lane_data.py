"""A rank's events arranged for drawing: one *row* per (lane, depth), with level-of-detail spans.

Inside a row events never overlap (GPU sub-rows and CPU nesting levels are built that way by the
loader), so a row's starts *and* ends are sorted and the visible window is two binary searches.
Rows of one rank are contiguous slices of a few columns (float64 ms, event index, family): about
29 bytes per event, built once with numpy (no Python object per event).

Zoomed out, thousands of events fall into one pixel. :func:`merge_spans` merges every chain of
events closer than a pixel into one span coloured by its longest event, so a row never yields more
spans than it has pixels. Rows with very many events also keep a lazily built pyramid of such
spans (1 µs, 4 µs, 16 µs, ... per pixel) so a full-view repaint of millions of events reads a few
thousand precomputed spans instead of merging every event again.

Nothing here knows Qt. The same builder works for any RankTrace-like object with the same columns
(e.g. a replayed, *predicted* timeline), so a second layer can be drawn from another source with
the same lane indexing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.trace.model import CPU_LANE_KINDS, GPU_ACTIVITY_KINDS, RankTrace

GPU_DRAWN = np.asarray(GPU_ACTIVITY_KINDS, np.int8)
CPU_DRAWN = np.asarray(CPU_LANE_KINDS, np.int8)

_NS_PER_MS = 1e6
PYRAMID_MIN_EVENTS = 20_000  # rows with fewer events are merged from the raw events each paint
PYRAMID_BASE_MS = 1e-3  # level k merges at 1 µs · 4**k per pixel
_LEVEL_RATIO = 4.0


@dataclass
class Spans:
    """Drawable spans of one row in a window: [start, end) ms, family, and ``lead``: the table index
    of the span's longest event (the span's colour and, when it is wide enough, its label)."""

    start: np.ndarray
    end: np.ndarray
    family: np.ndarray
    lead: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class RowTable:
    """Drawable events of one rank, grouped into rows keyed by (lane, depth)."""

    keys: list[tuple[int, int]]
    begin: np.ndarray  # int64 (n_rows + 1) slice bounds per row
    start: np.ndarray  # float64 ms
    end: np.ndarray  # float64 ms
    event: np.ndarray  # int32 index into the rank's event table
    family: np.ndarray  # uint8
    row_of: dict[tuple[int, int], int] = field(default_factory=dict)
    depths: dict[int, int] = field(default_factory=dict)  # lane -> number of rows (max depth + 1)
    _reach: dict[int, np.ndarray] = field(default_factory=dict)  # rows whose ends are not sorted
    _pyramid: dict[tuple[int, int], tuple[tuple[np.ndarray, ...], np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.start)

    @property
    def n_rows(self) -> int:
        return len(self.keys)

    def row_slice(self, row: int) -> tuple[int, int]:
        return int(self.begin[row]), int(self.begin[row + 1])

    def window(self, row: int, x0: float, x1: float) -> tuple[int, int]:
        """Table indices [i0, i1) of the row's events that may intersect [x0, x1) ms."""
        a, b = self.row_slice(row)
        ends = self._reach.get(row)
        if ends is None:
            i0 = a + int(np.searchsorted(self.end[a:b], x0, side="right"))
        else:
            i0 = a + int(np.searchsorted(ends, x0, side="right"))
        i1 = a + int(np.searchsorted(self.start[a:b], x1, side="left"))
        return i0, max(i0, i1)

    def spans(self, row: int, x0: float, x1: float, px: float) -> Spans:
        """Spans to draw for ``row`` in [x0, x1) at ``px`` ms per pixel (merged below a pixel)."""
        a, b = self.row_slice(row)
        level = _level_for(px)
        if b - a >= PYRAMID_MIN_EVENTS and level >= 0:
            cols, reach = self._level(row, level)
            i0 = int(np.searchsorted(reach, x0, side="right"))
            i1 = max(i0, int(np.searchsorted(cols[0], x1, side="left")))
            return _as_spans(_merge(*(c[i0:i1] for c in cols), px), px)
        i0, i1 = self.window(row, x0, x1)
        s = self.start[i0:i1]
        e = self.end[i0:i1]
        keep = e >= x0  # rows with unsorted ends may include events that end before the window
        if not keep.all():
            idx = np.flatnonzero(keep)
            return _as_spans(merge_spans(s[idx], e[idx], self.family[i0:i1][idx], i0 + idx, px), px)
        return _as_spans(merge_spans(s, e, self.family[i0:i1], np.arange(i0, i1), px), px)

    def _level(self, row: int, level: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """Spans of ``row`` merged at level ``level`` and their drawn ends there (sorted)."""
        got = self._pyramid.get((row, level))
        if got is None:
            finer = next((k for k in range(level - 1, -1, -1) if (row, k) in self._pyramid), None)
            if finer is None:
                a, b = self.row_slice(row)
                s, e, f = self.start[a:b], self.end[a:b], self.family[a:b]
                src: tuple[np.ndarray, ...] = (s, e, s, f, e - s, np.arange(a, b))
            else:
                src = self._pyramid[(row, finer)][0]
            px_level = PYRAMID_BASE_MS * _LEVEL_RATIO**level
            cols = _merge(*src, px_level)
            got = (cols, np.maximum(cols[1], cols[2] + px_level))
            self._pyramid[(row, level)] = got
        return got

    def find(self, row: int, x: float, tolerance: float) -> int:
        """Table index of the event of ``row`` under ``x`` (ms), or the nearest within
        ``tolerance`` ms; -1 if none."""
        a, b = self.row_slice(row)
        if a == b:
            return -1
        i = a + int(np.searchsorted(self.start[a:b], x, side="right")) - 1
        best, best_d = -1, tolerance
        for j in (i, i + 1, i - 1):
            if a <= j < b:
                s, e = self.start[j], self.end[j]
                d = 0.0 if s <= x <= e else min(abs(x - s), abs(x - e))
                if d <= best_d:
                    best, best_d = j, d
                    if d == 0.0:
                        break
        return best

    @property
    def nbytes(self) -> int:
        n = self.start.nbytes + self.end.nbytes + self.event.nbytes + self.family.nbytes + self.begin.nbytes
        n += sum(r.nbytes for r in self._reach.values())
        n += sum(sum(a.nbytes for a in cols) + reach.nbytes for cols, reach in self._pyramid.values())
        return n


def _kind_table(gpu_only: bool) -> np.ndarray:
    """Drawn or not, by ``256 * on_gpu_lane + kind`` (kinds as unsigned bytes)."""
    table = np.zeros(512, bool)
    if not gpu_only:
        table[CPU_DRAWN.view(np.uint8).astype(np.intp)] = True
    table[256 + GPU_DRAWN.view(np.uint8).astype(np.intp)] = True
    return table


_DRAWN = (_kind_table(False), _kind_table(True))


def drawable_events(rank: RankTrace, gpu_only: bool = False) -> np.ndarray:
    """Indices of the events of ``rank`` the timeline draws (GPU activities on GPU lanes, CPU
    events on CPU lanes; with ``gpu_only`` the former alone), in event order."""
    kind = rank.kind
    if len(kind) == 0:
        return np.zeros(0, np.int64)
    is_gpu_lane = np.fromiter((ln.is_gpu for ln in rank.lanes), bool, len(rank.lanes))
    on_gpu = is_gpu_lane[rank.lane] if len(is_gpu_lane) else np.zeros(len(kind), bool)
    if kind.dtype.itemsize == 1:  # one lookup instead of an isin per kind set (2-3x faster)
        code = on_gpu.view(np.uint8).astype(np.intp) * 256 + kind.view(np.uint8)
        return np.flatnonzero(_DRAWN[gpu_only][code])
    if gpu_only:
        return np.flatnonzero(on_gpu & np.isin(kind, GPU_DRAWN))
    keep = np.where(on_gpu, np.isin(kind, GPU_DRAWN), np.isin(kind, CPU_DRAWN))
    return np.flatnonzero(keep)


def build_row_table(rank: RankTrace, families: np.ndarray) -> RowTable:
    """Arrange the drawable events of ``rank`` (GPU activities, CPU events) into rows."""
    if len(rank.kind) == 0:
        return empty_table()
    idx = drawable_events(rank)
    key = rank.lane[idx].astype(np.int64) * 65536 + rank.depth[idx].astype(np.int64)
    order = row_order(rank.lane[idx], rank.depth[idx], key, rank.start[idx])
    idx = idx[order]
    key = key[order]
    heads = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    begin = np.r_[heads, len(key)].astype(np.int64)
    keys = [(int(k >> 16), int(k & 0xFFFF)) for k in key[heads]]
    start = rank.start[idx] / _NS_PER_MS
    end = (rank.start[idx] + rank.dur[idx]) / _NS_PER_MS
    table = RowTable(
        keys=keys,
        begin=begin,
        start=start,
        end=end,
        event=idx.astype(np.int32),
        family=families[idx].astype(np.uint8),
    )
    table.row_of = {k: r for r, k in enumerate(keys)}
    for lane, depth in keys:
        table.depths[lane] = max(table.depths.get(lane, 0), depth + 1)
    for r in range(len(keys)):
        a, b = int(begin[r]), int(begin[r + 1])
        e = end[a:b]
        if b - a > 1 and bool((e[1:] < e[:-1]).any()):
            # improperly nested CPU events: search on the running maximum instead
            table._reach[r] = np.maximum.accumulate(e)
    return table


def row_order(lane: np.ndarray, depth: np.ndarray, key: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The order that sorts events by row (``key``: lane, then depth), then ``start``, ties kept in
    place: what ``np.lexsort((start, key))`` gives. Loaded events are already in start order per
    lane, so a stable sort by row alone is tried first, and kept when it leaves every row in start
    order: with few rows the row is a 16-bit code, which numpy sorts stably by radix (a few times
    faster than the full sort). A predicted timeline keeps the measured order, where events that
    move with their neighbours may swap, and takes the full sort."""
    if not len(key):
        return np.zeros(0, np.int64)
    n_depths = int(depth.max()) + 1
    if int(depth.min()) >= 0 and (int(lane.max()) + 1) * n_depths <= 65536:
        code = (lane.astype(np.int64) * n_depths + depth).astype(np.uint16)
        order = np.argsort(code, kind="stable")
    else:
        order = np.argsort(key, kind="stable")
    k, s = key[order], start[order]
    if bool(((s[1:] < s[:-1]) & (k[1:] == k[:-1])).any()):
        return np.lexsort((start, key))
    return order


def empty_table() -> RowTable:
    return RowTable(
        [], np.zeros(1, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int32), np.zeros(0, np.uint8)
    )


def _level_for(px: float) -> int:
    if px < PYRAMID_BASE_MS:
        return -1
    return int(np.floor(np.log(px / PYRAMID_BASE_MS) / np.log(_LEVEL_RATIO) + 1e-9))


def merge_spans(
    start: np.ndarray, end: np.ndarray, family: np.ndarray, index: np.ndarray, px: float
) -> tuple[np.ndarray, ...]:
    """Merge events (sorted by start, table indices ``index``) into spans at ``px`` ms per pixel.

    Returns (start, end, tail, family, weight, lead) as :func:`_merge`; draw a span from ``start``
    to ``max(end, tail + px)``.
    """
    return _merge(start, end, start, family, end - start, index, px)


def _merge(
    start: np.ndarray,
    end: np.ndarray,
    tail: np.ndarray,
    family: np.ndarray,
    weight: np.ndarray,
    lead: np.ndarray,
    px: float,
) -> tuple[np.ndarray, ...]:
    """Widen every member to at least ``px`` and merge members that then touch or overlap.

    A member is an event or an already merged span: ``end`` is the true end of its last work,
    ``tail`` the start of its last event (a merged span is drawn to ``max(end, tail + px)``, exactly
    as its events would be), so merging spans again at a coarser ``px`` gives the same result as
    merging the events directly. The family, weight and ``lead`` (table index) of a merged span are
    those of its longest event.
    """
    n = len(start)
    if n == 0:
        return start, end, tail, family, weight, lead
    reach = np.maximum.accumulate(np.maximum(end, tail + px))
    new = np.empty(n, bool)
    new[0] = True
    np.greater(start[1:], reach[:-1], out=new[1:])
    heads = np.flatnonzero(new)
    if len(heads) == n:
        return start, end, tail, family, weight, lead
    # longest event wins: pack (duration, family) into one int64 and take the max per span, then
    # the first member that reaches it is the span's lead
    packed = np.minimum(weight * _NS_PER_MS, 2**50).astype(np.int64) * 32 + family.astype(np.int64)
    best = np.maximum.reduceat(packed, heads)
    seg = np.cumsum(new) - 1
    cand = np.flatnonzero(packed == best[seg])
    first = cand[np.r_[True, seg[cand][1:] != seg[cand][:-1]]]
    return (
        start[heads],
        np.maximum.reduceat(end, heads),
        np.maximum.reduceat(tail, heads),
        (best % 32).astype(np.uint8),
        (best // 32) / _NS_PER_MS,
        lead[first],
    )


def _as_spans(merged: tuple[np.ndarray, ...], px: float) -> Spans:
    s, e, tail, f, _w, lead = merged
    return Spans(s, np.maximum(e, tail + px), f, lead)
