"""What every rank's GPU is doing, binned into the pixel columns of the job overview strip.

For each rank and each pixel column of a time window, the busy time of its GPU streams is split
into *compute* (every non-NCCL kernel, memcpy and memset) and *communication* (NCCL kernels); the
rest of the column is *idle*. A column gets the colour of whichever of the three holds most of it.

Inside one timeline row (a stream's overlap sub-row) events never overlap and are sorted, so the
busy time before any instant t is a prefix sum plus the clipped part of the event under t: two
``searchsorted`` calls per row over the column edges, no loop over events. The whole job at 256
ranks and a 1000-pixel strip takes a few ms (bench: ``bench/bench_overview.py``).

Nothing here knows Qt: the widget (:mod:`app.timeline.overview`) turns the classes into colours.
"""

from __future__ import annotations

import numpy as np

from app.timeline.lane_data import RowTable
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import RankTrace

IDLE, COMPUTE, COMMUNICATION = 0, 1, 2
ACTIVITY_NAMES = ("idle", "compute", "communication")
COMM_FAMILIES = np.arange(int(Family.NCCL_ALL_REDUCE), int(Family.NCCL_OTHER) + 1)
# the families whose colour stands for a class in the strip (the legend's colours)
CLASS_FAMILY = {COMPUTE: int(Family.GEMM), COMMUNICATION: int(Family.NCCL_ALL_REDUCE)}


def gpu_rows(rank: RankTrace, table: RowTable) -> list[int]:
    """Rows of ``table`` that hold GPU stream events."""
    return [r for r, (lane, _d) in enumerate(table.keys) if rank.lanes[lane].is_gpu]


def busy_before(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Total time of the sorted, non-overlapping intervals [start, end) that lies before each ``t``."""
    if len(start) == 0:
        return np.zeros(len(t))
    cum = np.r_[0.0, np.cumsum(end - start)]
    k = np.searchsorted(start, t, side="right")  # intervals starting at or before t
    last = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.clip(t - start[last], 0.0, end[last] - start[last]), 0.0)
    return cum[np.maximum(k - 1, 0)] * (k > 0) + partial


def rank_activity(
    rank: RankTrace, table: RowTable, x0: float, x1: float, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Compute and communication busy fraction (0..1, each) of every column of [x0, x1) ms."""
    edges = np.linspace(x0, x1, width + 1)
    col = (x1 - x0) / width
    busy = np.zeros((2, width))
    for r in gpu_rows(rank, table):
        a, b = table.row_slice(r)
        s, e, f = table.start[a:b], table.end[a:b], table.family[a:b]
        comm = np.isin(f, COMM_FAMILIES)
        for cls, mask in ((0, ~comm), (1, comm)):
            if mask.any():
                c = busy_before(s[mask], e[mask], edges)
                busy[cls] += np.diff(c)
    return np.minimum(busy / col, 1.0)


def activity_classes(
    ranks: list[RankTrace], tables: list[RowTable], x0: float, x1: float, width: int
) -> np.ndarray:
    """(n_ranks, width) int8: IDLE, COMPUTE or COMMUNICATION, whichever fills most of each column."""
    out = np.zeros((len(ranks), max(width, 1)), np.int8)
    if width <= 0 or not x1 > x0:
        return out
    for i, (rank, table) in enumerate(zip(ranks, tables)):
        comp, comm = rank_activity(rank, table, x0, x1, width)
        idle = 1.0 - np.minimum(comp + comm, 1.0)
        out[i] = np.argmax(np.stack([idle, comp, comm]), axis=0)
    return out
