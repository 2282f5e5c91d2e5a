"""What every rank's GPU is doing, binned into the pixel columns of the job overview strip.

For each rank and each pixel column of a time window, the busy time of its GPU streams is split
into *compute* (every non-NCCL kernel, memcpy and memset) and *communication* (NCCL kernels); the
rest of the column is *idle*. A column gets the colour of whichever of the three holds most of it,
communication counting only where compute leaves room (overlapped communication costs nothing, and a
rank that computes while the others wait in a collective must read as computing).

Inside one timeline row (a stream's overlap sub-row) events never overlap and are sorted, so the
busy time before any instant t is a prefix sum plus the clipped part of the event under t: two
``searchsorted`` calls per row over the column edges, no loop over events. The rows are split by
class and summed once per job (:func:`activity_index`, on the loading worker); a rebuild of the
strip is then only the searches (figures: ``bench/bench_overview.py``).

Nothing here knows Qt: the widget (:mod:`app.timeline.overview`) turns the classes into colours.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.timeline.lane_data import RowTable, drawable_events
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import RankTrace

_NS_PER_MS = 1e6
IDLE, COMPUTE, COMMUNICATION = 0, 1, 2
ACTIVITY_NAMES = ("idle", "compute", "communication")
COMM_FAMILIES = np.arange(int(Family.NCCL_ALL_REDUCE), int(Family.NCCL_OTHER) + 1)
# the families whose colour stands for a class in the strip (the legend's colours)
CLASS_FAMILY = {COMPUTE: int(Family.GEMM), COMMUNICATION: int(Family.NCCL_ALL_REDUCE)}


def gpu_rows(rank: RankTrace, table: RowTable) -> list[int]:
    """Rows of ``table`` that hold GPU stream events."""
    return [r for r, (lane, _d) in enumerate(table.keys) if rank.lanes[lane].is_gpu]


def busy_before(
    start: np.ndarray, end: np.ndarray, t: np.ndarray, cum: np.ndarray | None = None
) -> np.ndarray:
    """Total time of the sorted, non-overlapping intervals [start, end) that lies before each ``t``.
    ``cum`` is ``[0, cumsum(end - start)]`` when the caller keeps it."""
    if len(start) == 0:
        return np.zeros(len(t))
    if cum is None:
        cum = np.r_[0.0, np.cumsum(end - start)]
    k = np.searchsorted(start, t, side="right")  # intervals starting at or before t
    last = np.maximum(k - 1, 0)
    return np.where(k > 0, cum[last] + np.clip(t - start[last], 0.0, end[last] - start[last]), 0.0)


class RankActivity:
    """A rank's GPU activity split by class, built once per job (on the loading worker) so a rebuild
    of the strip is only ``searchsorted`` over the column edges.

    Streams overlap, so the busy time of a class is summed over its events (capped at the column
    width by the caller): Σ clip(t - s, 0, e - s) = Σ_{s<=t} (t - s) - Σ_{e<=t} (t - e), which needs
    only the sorted starts and the sorted ends with their prefix sums, whatever overlaps."""

    def __init__(self, rank: RankTrace, table: RowTable) -> None:
        parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[], []]
        for r in gpu_rows(rank, table):
            a, b = table.row_slice(r)
            comm = np.isin(table.family[a:b], COMM_FAMILIES)
            parts[0].append((table.start[a:b][~comm], table.end[a:b][~comm]))
            parts[1].append((table.start[a:b][comm], table.end[a:b][comm]))
        self._index(parts)

    @classmethod
    def of_rank(cls, rank: RankTrace, families: np.ndarray) -> RankActivity:
        """The same index from the rank's events directly (no row table needed: the starts and
        ends are sorted per class anyway, so the rows' order does not matter)."""
        self = cls.__new__(cls)
        idx = drawable_events(rank, gpu_only=True)
        start = rank.start[idx] / _NS_PER_MS
        end = (rank.start[idx] + rank.dur[idx]) / _NS_PER_MS
        comm = np.isin(families[idx].astype(np.uint8), COMM_FAMILIES)
        self._index([[(start[~comm], end[~comm])], [(start[comm], end[comm])]] if len(idx) else [[], []])
        return self

    def _index(self, parts: list[list[tuple[np.ndarray, np.ndarray]]]) -> None:
        # per class: (sorted starts, their prefix sums, sorted ends, their prefix sums)
        self.classes: list[tuple[np.ndarray, ...]] = []
        for p in parts:
            s = np.sort(np.concatenate([x for x, _ in p])) if p else np.zeros(0)
            e = np.sort(np.concatenate([y for _, y in p])) if p else np.zeros(0)
            self.classes.append((s, np.r_[0.0, np.cumsum(s)], e, np.r_[0.0, np.cumsum(e)]))

    def busy(self, edges: np.ndarray) -> np.ndarray:
        """(2, len(edges) - 1): compute and communication busy time (ms) of every column."""
        out = np.zeros((2, len(edges) - 1))
        for cls, (s, cs, e, ce) in enumerate(self.classes):
            if len(s):
                ks = np.searchsorted(s, edges, side="right")
                ke = np.searchsorted(e, edges, side="right")
                before = (ks * edges - cs[ks]) - (ke * edges - ce[ke])
                out[cls] = np.diff(before)
        return out


def activity_index(ranks: list[RankTrace], tables: list[RowTable]) -> list[RankActivity]:
    return [RankActivity(rank, table) for rank, table in zip(ranks, tables)]


class JobActivity(Sequence[RankActivity]):
    """Every rank's :class:`RankActivity` stacked into one array per class and side, so that a
    rebuild of the strip is a few numpy calls for all ranks together instead of a dozen per rank
    (at 512 ranks, ~10 000 small calls were most of a 100–250 ms rebuild).

    Each rank's sorted values are mapped to ``(value - lo) + rank * span`` (``span`` a power of
    two above the job's time range), which keeps them sorted across ranks: one ``searchsorted`` of
    every rank's column edges, mapped the same way, then counts each rank's values at or before
    each edge. The mapping is monotonic, so a count can only differ from the rank's own search for
    a value within a rounding step (picoseconds) of an edge. The per-rank objects stay usable:
    their arrays become views of the stacked ones (no second copy)."""

    def __init__(self, per_rank: list[RankActivity]) -> None:
        self.ranks = per_rank
        n = len(per_rank)
        values = [x for act in per_rank for cls in act.classes for x in (cls[0], cls[2]) if len(x)]
        self.lo = min((float(v[0]) for v in values), default=0.0)
        hi = max((float(v[-1]) for v in values), default=0.0)
        self.hi = hi
        self.span = float(2.0 ** np.ceil(np.log2(hi - self.lo + 4.0)))
        self.offsets = np.arange(n, dtype=np.float64) * self.span
        # per class, per side (starts, ends): (mapped keys, prefix sums, first key of each rank,
        # first prefix sum of each rank)
        self.parts: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = []
        for c in range(2):
            sides = []
            for k in (0, 2):
                vals = [act.classes[c][k] for act in per_rank]
                cums = [act.classes[c][k + 1] for act in per_rank]
                counts = np.fromiter((len(v) for v in vals), np.int64, n)
                base = np.r_[0, np.cumsum(counts)[:-1]] if n else np.zeros(0, np.int64)
                flat = np.concatenate(vals) if n else np.zeros(0)
                cum = np.concatenate(cums) if n else np.zeros(0)
                keys = (flat - self.lo) + np.repeat(self.offsets, counts)
                sides.append((keys, cum, base, base + np.arange(n)))
                # the ranks' own arrays become views of the stacked ones
                for r, act in enumerate(per_rank):
                    a, b = int(base[r]), int(base[r] + counts[r])
                    ca = a + r
                    cls = list(act.classes[c])
                    cls[k], cls[k + 1] = flat[a:b], cum[ca : ca + b - a + 1]
                    act.classes[c] = tuple(cls)
            self.parts.append(sides)

    def __len__(self) -> int:
        return len(self.ranks)

    def __getitem__(self, i: int) -> RankActivity:  # type: ignore[override]
        return self.ranks[i]

    def busy(self, edges: np.ndarray) -> np.ndarray:
        """(2, n_ranks, len(edges) - 1): :meth:`RankActivity.busy` of every rank."""
        n = len(self.ranks)
        out = np.zeros((2, n, len(edges) - 1))
        if n == 0:
            return out
        mapped = (np.clip(edges, self.lo - 1.0, self.hi + 1.0) - self.lo)[None, :] + self.offsets[:, None]
        flat = mapped.ravel()
        for c, sides in enumerate(self.parts):
            before = np.zeros((n, len(edges)))
            for sign, (keys, cum, base, cbase) in zip((1.0, -1.0), sides):
                if not len(keys):
                    continue
                ks = np.searchsorted(keys, flat, side="right").reshape(n, -1) - base[:, None]
                before += sign * (ks * edges[None, :] - cum[cbase[:, None] + ks])
            out[c] = np.diff(before, axis=1)
        return out


def job_activity(ranks: list[RankTrace], families: list[np.ndarray]) -> JobActivity:
    """:func:`activity_index` from the ranks' events, without their row tables, stacked."""
    return JobActivity([RankActivity.of_rank(rank, fam) for rank, fam in zip(ranks, families)])


def rank_activity(
    rank: RankTrace | RankActivity, table: RowTable | None, x0: float, x1: float, width: int
) -> np.ndarray:
    """Compute and communication busy fraction (0..1, each) of every column of [x0, x1) ms."""
    index = rank if isinstance(rank, RankActivity) else RankActivity(rank, table)
    edges = np.linspace(x0, x1, width + 1)
    return np.minimum(index.busy(edges) / ((x1 - x0) / width), 1.0)


def activity_classes(
    ranks: list[RankTrace],
    tables: list[RowTable],
    x0: float,
    x1: float,
    width: int,
    index: list[RankActivity] | JobActivity | None = None,
) -> np.ndarray:
    """(n_ranks, width) int8: IDLE, COMPUTE or COMMUNICATION, whichever fills most of each column.
    ``index`` (from :func:`activity_index` or :func:`job_activity`) saves splitting the rows again;
    a :class:`JobActivity` bins every rank at once."""
    out = np.zeros((len(ranks), max(width, 1)), np.int8)
    if width <= 0 or not x1 > x0:
        return out
    index = index if index is not None else activity_index(ranks, tables)
    edges = np.linspace(x0, x1, width + 1)
    col = (x1 - x0) / width
    if isinstance(index, JobActivity):
        comp, comm = np.minimum(index.busy(edges) / col, 1.0)
        return _classes(comp, comm)
    for i, act in enumerate(index):
        comp, comm = np.minimum(act.busy(edges) / col, 1.0)
        out[i] = _classes(comp, comm)
    return out


def _classes(comp: np.ndarray, comm: np.ndarray) -> np.ndarray:
    # communication overlapped by compute is hidden: it only counts where compute leaves room
    exposed = np.minimum(comm, 1.0 - comp)
    idle = 1.0 - np.minimum(comp + comm, 1.0)
    return np.argmax(np.stack([idle, comp, exposed]), axis=0).astype(np.int8)
