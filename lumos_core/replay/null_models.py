"""Null models: what a replay must beat before its accuracy means anything.

Each is evaluated on the same held-out iterations, with the same metrics, as the hold-out replay
(:mod:`lumos_core.replay.evaluate`):

``persistence``  iteration *k* takes the mean time of the other iterations; each GPU task starts
                 where its twins started, relative to their iteration's start.
``cpu_only``     the hold-out graph without GPU->CPU dependencies (syncs, the launch queue): the
                 CPU never waits for the GPU.
``no_lag``       the hold-out graph with every learned dependency lag at zero (launch latency,
                 event and sync latencies, cross-thread waits): tasks start the moment their
                 dependencies end. The CPU work between a thread's tasks is k's own and kept.
``gpu_only``     each rank's GPU streams alone: launches ignored, so every GPU task starts once its
                 stream, event waits and collectives allow; the iteration is the span of its GPU
                 work (first GPU start of *k* to the first of *k+1*, or the last GPU end).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.replay.holdout import NEVER, HoldoutGraph
from lumos_core.replay.twins import Iterations

NULL_MODELS = ("persistence", "cpu_only", "no_lag", "gpu_only")


def cpu_only(h: HoldoutGraph) -> ExecutionGraph:
    g = h.graph
    drop = np.isin(g.ep_kind, [EdgeKind.SYNC, EdgeKind.LAUNCH_QUEUE]) & ~h.pinned[g.ep_dst]
    return dataclasses.replace(g, ep_lag=np.where(drop, NEVER, g.ep_lag))


def no_lag(h: HoldoutGraph) -> ExecutionGraph:
    g = h.graph
    sp = ~h.pinned[g.sp_dst] & (g.sp_kind != EdgeKind.CPU_THREAD) & (g.sp_lag != NEVER)
    ep = ~h.pinned[g.ep_dst] & (g.ep_lag != NEVER)
    return dataclasses.replace(g, sp_lag=np.where(sp, 0, g.sp_lag), ep_lag=np.where(ep, 0, g.ep_lag))


def gpu_only(h: HoldoutGraph, its: Iterations) -> ExecutionGraph:
    g = h.graph
    drop = (g.sp_kind == EdgeKind.LAUNCH) & ~h.pinned[g.sp_dst]
    anchor = g.anchor.copy()
    # A GPU task that only waited for its launch starts no earlier than its iteration.
    for (r, k), w in its.windows.items():
        if k == h.k:
            sel = (g.rank == r) & (its.region == k) & (g.node_type != NodeType.CPU)
            anchor[sel] = np.maximum(anchor[sel], w.start)
    return dataclasses.replace(g, sp_lag=np.where(drop, NEVER, g.sp_lag), anchor=anchor)


def gpu_span_iteration(
    graph: ExecutionGraph, its: Iterations, rank: int, k: int, start: np.ndarray, end: np.ndarray
) -> int | None:
    """The GPU-only model's iteration time of ``rank``: its GPU work of k, first start to the next
    iteration's first start (or to k's last end for the last iteration)."""
    gpu = (graph.rank == rank) & (graph.node_type == NodeType.GPU)
    mine = np.flatnonzero(gpu & (its.region == k))
    if len(mine) == 0:
        return None
    disp = np.where(graph.arrive_of[mine] >= 0, graph.arrive_of[mine], mine)
    first = int(start[disp].min())
    nxt = np.flatnonzero(gpu & (its.region == k + 1))
    if len(nxt):
        d2 = np.where(graph.arrive_of[nxt] >= 0, graph.arrive_of[nxt], nxt)
        return int(start[d2].min()) - first
    return int(end[mine].max()) - first


def persistence_starts(
    graph: ExecutionGraph, its: Iterations, maps: dict[int, np.ndarray], k: int
) -> np.ndarray:
    """Predicted start of every node of iteration k: its twins' mean offset from their iteration's
    start, added to k's start; a task without a twin follows the previous one on its processor."""
    n = graph.n_nodes
    total = np.zeros(n, np.float64)
    count = np.zeros(n, np.int64)
    for j, m in maps.items():
        for r in np.unique(graph.rank[graph.rank >= 0]).tolist():
            w = its.windows.get((r, j))
            if w is None:
                continue
            x = np.flatnonzero((its.region == j) & (graph.rank == r) & (m >= 0))
            np.add.at(total, m[x], graph.measured_start[x] - w.start)
            np.add.at(count, m[x], 1)
    pred = np.full(n, -1, np.int64)
    for r in np.unique(graph.rank[graph.rank >= 0]).tolist():
        w = its.windows.get((r, k))
        if w is None:
            continue
        mine = np.flatnonzero((its.region == k) & (graph.rank == r))
        for p in np.unique(graph.proc[mine]).tolist():
            nodes = mine[graph.proc[mine] == p]
            have = count[nodes] > 0
            off = np.where(have, total[nodes] / np.maximum(count[nodes], 1), np.nan)
            # forward fill: a task no other iteration has starts with the task before it
            idx = np.where(have, np.arange(len(nodes)), -1)
            np.maximum.accumulate(idx, out=idx)
            filled = np.where(idx >= 0, off[np.maximum(idx, 0)], 0.0)
            pred[nodes] = w.start + np.rint(filled).astype(np.int64)
    return pred
