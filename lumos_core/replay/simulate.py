"""Replay an execution graph: the discrete-event simulation of paper §3.5 (Algorithm 1).

Every processor (thread, stream) runs its tasks in their recorded order, so the simulation has
no scheduling choice left to make: a task starts at the latest of its dependencies (same-processor
predecessor included) and ends after its duration, or — for a blocking call — when the GPU work it
waits for has ended. Processing the nodes in a topological order therefore computes exactly what
an event queue would, deterministically, in one pass (no Python object per task, no heap
operations). The pass is compiled (:func:`lumos_core.replay.kernels.simulate_pass`); without numba the same loop runs as
Python. tests/kernel_references.py holds an independent list-based version the tests compare with.
"""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import ExecutionGraph
from lumos_core.replay.kernels import simulate_pass


def simulate(
    graph: ExecutionGraph, dur: np.ndarray | None = None, sp_lag: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end time (ns) of every node. ``dur``/``sp_lag`` override the graph's (what-ifs)."""
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
