"""Replay an execution graph: the discrete-event simulation of paper §3.5 (Algorithm 1).

Every processor (thread, stream) runs its tasks in their recorded order, so the simulation has
no scheduling choice left to make: a task starts at the latest of its dependencies (same-processor
predecessor included) and ends after its duration, or — for a blocking call — when the GPU work it
waits for has ended. Processing the nodes in a topological order therefore computes exactly what
an event queue would, deterministically, in one pass (no Python object per task, no heap
operations). The pass is compiled (:func:`lumos_core.replay.kernels.simulate_pass`); without numba
:func:`simulate_reference` runs it over flat Python lists, with identical results.
"""

from __future__ import annotations

import numpy as np

from lumos_core import jit
from lumos_core.graph.model import ExecutionGraph
from lumos_core.replay.kernels import simulate_pass


def simulate(
    graph: ExecutionGraph, dur: np.ndarray | None = None, sp_lag: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end time (ns) of every node. ``dur``/``sp_lag`` override the graph's (what-ifs)."""
    if not jit.ENABLED:
        return simulate_reference(graph, dur, sp_lag)
    g = graph
    d = np.ascontiguousarray(g.dur if dur is None else dur, np.int64)
    lag = np.ascontiguousarray(g.sp_lag if sp_lag is None else sp_lag, np.int64)
    return simulate_pass(
        g.order,
        g.anchor,
        d,
        g.sp_ptr,
        g.sp_src,
        g.sp_from_end,
        lag,
        g.ep_ptr,
        g.ep_src,
        g.ep_from_end,
        g.ep_lag,
    )


def simulate_reference(
    graph: ExecutionGraph, dur: np.ndarray | None = None, sp_lag: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simulate` in plain Python, over flat lists."""
    n = graph.n_nodes
    d = (graph.dur if dur is None else dur).tolist()
    lag = (graph.sp_lag if sp_lag is None else sp_lag).tolist()
    # times[2u] is u's start, times[2u + 1] its end: an edge reads times[ref] with ref = 2u + from_end.
    ref = (graph.sp_src.astype(np.int64) * 2 + graph.sp_from_end).tolist()
    ptr = graph.sp_ptr.tolist()
    e_ptr = graph.ep_ptr.tolist()
    e_ref = (graph.ep_src.astype(np.int64) * 2 + graph.ep_from_end).tolist()
    e_lag = graph.ep_lag.tolist()
    anchor = graph.anchor.tolist()
    times = [0] * (2 * n)
    for v in graph.order.tolist():
        s = anchor[v]
        a = ptr[v]
        b = ptr[v + 1]
        if b - a == 1:  # most tasks (~70 %) have one predecessor: skip the range() object
            x = times[ref[a]] + lag[a]
            if x > s:
                s = x
        else:
            for j in range(a, b):
                x = times[ref[j]] + lag[j]
                if x > s:
                    s = x
        e = s + d[v]
        a = e_ptr[v]
        b = e_ptr[v + 1]
        if a != b:
            for j in range(a, b):
                x = times[e_ref[j]] + e_lag[j]
                if x > e:
                    e = x
        times[2 * v] = s
        times[2 * v + 1] = e
    arr = np.fromiter(times, np.int64, 2 * n).reshape(n, 2)  # fromiter: ~4x faster than asarray on a list
    return arr[:, 0].copy(), arr[:, 1].copy()


def binding_predecessor(
    graph: ExecutionGraph, start: np.ndarray, end: np.ndarray, v: int, sp_lag: np.ndarray | None = None
) -> tuple[int, int]:
    """(node, edge kind) that determined ``v``'s start, or (-1, -1) if it started at its anchor."""
    lag = graph.sp_lag if sp_lag is None else sp_lag
    a, b = int(graph.sp_ptr[v]), int(graph.sp_ptr[v + 1])
    best, best_u, best_k = int(graph.anchor[v]), -1, -1
    for j in range(a, b):
        u = int(graph.sp_src[j])
        x = int(end[u] if graph.sp_from_end[j] else start[u]) + int(lag[j])
        if x >= best:
            best, best_u, best_k = x, u, int(graph.sp_kind[j])
    return best_u, best_k


def binding_end_predecessor(
    graph: ExecutionGraph, start: np.ndarray, end: np.ndarray, v: int
) -> tuple[int, int]:
    """(node, edge kind) that made a blocking call end late, or (-1, -1)."""
    a, b = int(graph.ep_ptr[v]), int(graph.ep_ptr[v + 1])
    best, best_u, best_k = int(start[v] + graph.dur[v]), -1, -1
    for j in range(a, b):
        u = int(graph.ep_src[j])
        x = int(end[u] if graph.ep_from_end[j] else start[u]) + int(graph.ep_lag[j])
        if x > best:
            best, best_u, best_k = x, u, int(graph.ep_kind[j])
    return best_u, best_k
