"""Topological order of the graph's nodes (the replay processes them in it), the CSR layout of its
edge lists, and the error that names the tasks of a cycle."""

from __future__ import annotations

import heapq

import numpy as np

from lumos_core import jit
from lumos_core.errors import GraphError
from lumos_core.graph import kernels
from lumos_core.graph.model import NodeType
from lumos_core.trace.model import Job


def stable_order_by_node(n: int, ids: np.ndarray) -> np.ndarray:
    """``np.argsort(ids, kind="stable")`` for node ids in [0, n) (compiled: a counting sort)."""
    if not jit.ENABLED or len(ids) == 0 or ids.min() < 0 or ids.max() >= n:
        return np.argsort(ids, kind="stable")  # (an id out of range is the caller's error to raise)
    return kernels.stable_bucket_order(np.ascontiguousarray(ids), n)


def csr(n: int, dst: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    order = stable_order_by_node(n, dst)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return ptr, tuple(c[order] for c in cols)


def topological_order(
    measured_start: np.ndarray,
    measured_end: np.ndarray,
    node_type: np.ndarray,
    sp_ptr: np.ndarray,
    sp_src: np.ndarray,
    ep_ptr: np.ndarray,
    ep_src: np.ndarray,
) -> np.ndarray:
    """Measured time is almost a topological order; verify it, and fall back to Kahn's algorithm."""
    n = len(node_type)
    key = measured_start.astype(np.int64).copy()
    has_end_dep = np.diff(ep_ptr) > 0
    key[has_end_dep] = measured_end[has_end_dep]  # a blocking call is final when it ends
    typ = node_type
    # Ties: at equal times a collective's join comes after every other node (its arrivals included),
    # then by id (chain order). A transfer starts with its join but sorts before it, so graphs with
    # collectives usually fail the check below and take Kahn's algorithm, which orders them right.
    tie = (typ == NodeType.JOIN).astype(np.int8)
    order = np.lexsort((np.arange(n, dtype=np.int32), tie, key))
    del tie
    if _is_topological(order, sp_ptr, sp_src, ep_ptr, ep_src):
        return order.astype(np.int32)
    del order
    ids = np.arange(n, dtype=np.int32)
    dst = np.concatenate([np.repeat(ids, np.diff(sp_ptr)), np.repeat(ids, np.diff(ep_ptr))])
    del ids
    return kahn(n, np.concatenate([sp_src, ep_src]).astype(np.int32), dst, key)


def _is_topological(
    order: np.ndarray, sp_ptr: np.ndarray, sp_src: np.ndarray, ep_ptr: np.ndarray, ep_src: np.ndarray
) -> bool:
    """Whether every dependency's source comes before its destination in ``order`` (its own
    function so that its edge-sized temporaries are gone before Kahn's algorithm runs)."""
    n = len(order)
    pos = np.empty(n, np.int32)
    pos[order] = np.arange(n, dtype=np.int32)
    for ptr, src in ((sp_ptr, sp_src), (ep_ptr, ep_src)):
        dst_pos = np.repeat(pos, np.diff(ptr))
        if np.count_nonzero(pos[src] >= dst_pos):
            return False
    return True


def kahn(n: int, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Topological order preferring earlier measured times; raises GraphError on a cycle.

    Runs the compiled loop (:func:`lumos_core.graph.kernels.kahn_order`); :func:`kahn_reference` is
    the same algorithm on ``heapq``, used without numba and by the tests."""
    if not jit.ENABLED:
        return kahn_reference(n, src, dst, key)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    succ = dst[stable_order_by_node(n, src)]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    out, deg = kernels.kahn_order(ptr, succ, indeg, np.ascontiguousarray(key, np.int64))
    if len(out) < n:
        raise _cycle_error(n, len(out), np.flatnonzero(deg > 0)[:5].tolist())
    return out


def _cycle_error(n: int, done: int, stuck: list[int]) -> GraphError:
    err = GraphError(
        f"the execution graph has a cycle ({n - done} tasks can never start, e.g. nodes "
        f"{stuck}); a cudaStreamWaitEvent or sync was probably paired with the wrong work"
    )
    err.stuck = (n - done, stuck)  # type: ignore[attr-defined]
    return err


def kahn_reference(n: int, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> np.ndarray:
    """:func:`kahn` in Python."""
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    order_e = np.argsort(src, kind="stable")
    s_sorted, d_sorted = src[order_e], dst[order_e]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(s_sorted, minlength=n), out=ptr[1:])
    succ = d_sorted.tolist()
    ptr_l = ptr.tolist()
    key_l = key.tolist()
    deg = indeg.tolist()
    heap = [(key_l[v], v) for v in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = succ[j]
            deg[w] -= 1
            if deg[w] == 0:
                heapq.heappush(heap, (key_l[w], w))
    if len(out) < n:
        raise _cycle_error(n, len(out), [v for v in range(n) if deg[v] > 0][:5])
    return np.asarray(out, np.int32)


def cycle_message(job: Job, rank: np.ndarray, event: np.ndarray, exc: GraphError) -> str:
    """A cycle error naming the rank files and tasks involved (instead of node ids)."""
    count, stuck = getattr(exc, "stuck", (0, []))
    tasks, files = [], []
    for v in stuck:
        r, e = int(rank[v]), int(event[v])
        if r < 0 or e < 0:  # a collective's join node
            continue
        t = job.rank(r)
        tasks.append(f"{t.name_of(e)!r} (rank {r})")
        files.append(t.file.rsplit("/", 1)[-1])
    if not tasks:
        return str(exc)
    return (
        f"{', '.join(dict.fromkeys(files))}: the execution graph has a cycle ({count} tasks can never "
        f"start, e.g. {', '.join(tasks[:3])}); a cudaStreamWaitEvent or sync was probably paired "
        "with the wrong work"
    )
