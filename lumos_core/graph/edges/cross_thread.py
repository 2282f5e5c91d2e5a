"""``CPU_CROSS``: a thread resuming after another thread's work."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind

CROSS_THREAD_GAP_NS = 100_000  # a pause this long on a thread may be a wait for another thread


def add_cross_thread(ctx: RankContext) -> None:
    """A thread that pauses and resumes right after another thread's task ended waited for it."""
    t, rn, sp = ctx.trace, ctx.nodes, ctx.start_deps
    cpu_nodes = np.flatnonzero(~rn.is_gpu)
    if len(cpu_nodes) == 0:
        return
    ev = rn.events[cpu_nodes]
    lane = t.lane[ev]
    lanes = np.unique(lane)
    if len(lanes) < 2:
        return
    start = t.start[ev]
    end = start + t.dur[ev]
    first_of_lane = np.ones(len(ev), bool)
    first_of_lane[1:] = lane[1:] != lane[:-1]
    prev_end = np.r_[0, end[:-1]]
    gap = np.where(first_of_lane, np.iinfo(np.int64).max // 4, start - prev_end)
    cand = np.flatnonzero(gap > CROSS_THREAD_GAP_NS)
    if len(cand) == 0:
        return
    best_end = np.full(len(cand), -1, np.int64)
    best_src = np.full(len(cand), -1, np.int64)
    for other in lanes:
        sel = np.flatnonzero(lane == other)
        order = np.argsort(end[sel], kind="stable")
        ends_sorted = end[sel][order]
        pos = np.searchsorted(ends_sorted, start[cand], side="right") - 1
        valid = (pos >= 0) & (lane[cand] != other)
        cand_end = np.where(valid, ends_sorted[np.maximum(pos, 0)], -1)
        lower = np.where(first_of_lane[cand], np.iinfo(np.int64).min, prev_end[cand])
        valid &= cand_end > lower  # it ended during the pause
        better = valid & (cand_end > best_end)
        best_end[better] = cand_end[better]
        best_src[better] = sel[order[np.maximum(pos, 0)]][better]
    found = best_src >= 0
    if not found.any():
        return
    dst_local = cand[found]
    src_local = best_src[found]
    sp.add(
        rn.base + cpu_nodes[src_local],
        rn.base + cpu_nodes[dst_local],
        start[dst_local] - end[src_local],
        True,
        EdgeKind.CPU_CROSS,
    )
