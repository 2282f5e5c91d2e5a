"""What every rank's GPU is doing, binned into the pixel columns of the job overview strip.

For each rank and each pixel column of a time window, the busy time of its GPU streams is split
into *compute* (every non-NCCL kernel, memcpy and memset) and *communication* (NCCL kernels); the
rest of the column is *idle*. A column gets the colour of whichever of the three holds most of it,
communication counting only where compute leaves room (overlapped communication costs nothing, and a
rank that computes while the others wait in a collective must read as computing).

Inside one timeline row (a stream's overlap sub-row) events never overlap and are sorted, so the
busy time before any instant t is a prefix sum plus the clipped part of the event under t: two
``searchsorted`` calls per row over the column edges, no loop over events. The rows are split by
class and summed once per job (:func:`job_activity`, on the loading worker, from the events: no row
table needed); a rebuild of the strip is then only the searches, ~20 numpy calls per rank (tens of
ms at 512 ranks: the strip bins big jobs on a worker, see :mod:`app.timeline.overview`; figures:
``bench/bench_overview.py``).

Nothing here knows Qt: the widget (:mod:`app.timeline.overview`) turns the classes into colours.
"""

from __future__ import annotations

import numpy as np

from app.view_model.lane_data import RowTable, drawable_events
from lumos_core.api.views import Family
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


def job_activity(ranks: list[RankTrace], families: list[np.ndarray]) -> list[RankActivity]:
    """:func:`activity_index` from the ranks' events, without their row tables."""
    return [RankActivity.of_rank(rank, fam) for rank, fam in zip(ranks, families)]


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
    index: list[RankActivity] | None = None,
) -> np.ndarray:
    """(n_ranks, width) int8: IDLE, COMPUTE or COMMUNICATION, whichever fills most of each column.
    ``index`` (from :func:`activity_index`) saves splitting the rows again."""
    out = np.zeros((len(ranks), max(width, 1)), np.int8)
    if width <= 0 or not x1 > x0:
        return out
    index = index if index is not None else activity_index(ranks, tables)
    edges = np.linspace(x0, x1, width + 1)
    col = (x1 - x0) / width
    for i, act in enumerate(index):
        comp, comm = np.minimum(act.busy(edges) / col, 1.0)
        # communication overlapped by compute is hidden: it only counts where compute leaves room
        exposed = np.minimum(comm, 1.0 - comp)
        idle = 1.0 - np.minimum(comp + comm, 1.0)
        out[i] = np.argmax(np.stack([idle, comp, exposed]), axis=0)
    return out
