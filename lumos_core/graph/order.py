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
    if not jit.ENABLED or not _in_range(n, ids):
        return np.argsort(ids, kind="stable")  # (an id out of range is the caller's error to raise)
    return kernels.stable_bucket_order(np.ascontiguousarray(ids), n)


def _in_range(n: int, *ids: np.ndarray) -> bool:
    """Whether every id is a node in [0, n) (compiled loops index without bounds checks)."""
    return all(len(a) == 0 or (int(a.min()) >= 0 and int(a.max()) < n) for a in ids)


def csr(
    n: int, dst: np.ndarray, src: np.ndarray, lag: np.ndarray, from_end: np.ndarray, kind: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Dependencies laid out by destination: ``ptr`` (n + 1) and (src as int32, lag, from_end, kind)
    in destination order, each destination's edges in their given order."""
    if jit.ENABLED and _in_range(n, dst, src):
        return kernels.csr_edges(
            n,
            np.ascontiguousarray(dst),
            np.ascontiguousarray(src),
            np.ascontiguousarray(lag, np.int64),
            np.ascontiguousarray(from_end, bool),
            np.ascontiguousarray(kind, np.int8),
        )
    return csr_reference(n, dst, src, lag, from_end, kind)


def csr_reference(
    n: int, dst: np.ndarray, src: np.ndarray, lag: np.ndarray, from_end: np.ndarray, kind: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`csr` in numpy."""
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    cols = (
        src[order].astype(np.int32),
        np.asarray(lag, np.int64)[order],
        np.asarray(from_end, bool)[order],
        np.asarray(kind, np.int8)[order],
    )
    return ptr, cols


def narrow_ptr(ptr: np.ndarray) -> np.ndarray:
    """A CSR ``ptr`` as int32 while its edge count fits (half the memory of two per-node columns at
    tens of millions of nodes), else as given (int64)."""
    if len(ptr) and int(ptr[-1]) < 2**31 - 1:
        return ptr.astype(np.int32)
    return ptr


def order_key(measured_start: np.ndarray, measured_end: np.ndarray, ep_ptr: np.ndarray) -> np.ndarray:
    """The time a node is final: its measured start, or its end for a blocking call (a node with end
    dependencies)."""
    key = np.array(measured_start, np.int64)
    has_end_dep = np.diff(ep_ptr) > 0
    key[has_end_dep] = measured_end[has_end_dep]
    return key


def topological_order(
    measured_start: np.ndarray,
    measured_end: np.ndarray,
    node_type: np.ndarray,
    sp_ptr: np.ndarray,
    sp_src: np.ndarray,
    ep_ptr: np.ndarray,
    ep_src: np.ndarray,
) -> np.ndarray:
    """Measured time is almost a topological order; verify it, and fall back to Kahn's algorithm.

    Ties: at equal times a collective's join comes after every other node (its arrivals included),
    then by id (chain order). A transfer starts with its join but sorts before it, so graphs with
    collectives usually fail that check and take Kahn's algorithm preferring (time, id), which
    orders them right. Compiled: :func:`lumos_core.graph.kernels.measured_order` (one radix sort,
    then linear passes while the measured order holds); :func:`topological_order_reference` is the same
    in numpy and ``heapq``."""
    n = len(node_type)
    if not jit.ENABLED or not _in_range(n, sp_src, ep_src):
        return topological_order_reference(
            measured_start, measured_end, node_type, sp_ptr, sp_src, ep_ptr, ep_src
        )
    by_key, sorted_key = kernels.sort_by_key(order_key(measured_start, measured_end, ep_ptr))
    out, deg = kernels.measured_order(
        by_key,
        sorted_key,
        np.asarray(node_type) == NodeType.JOIN,
        np.ascontiguousarray(sp_ptr, np.int64),
        np.ascontiguousarray(sp_src),
        np.ascontiguousarray(ep_ptr, np.int64),
        np.ascontiguousarray(ep_src),
    )
    if len(out) < n:
        raise _cycle_error(n, len(out), np.flatnonzero(deg > 0)[:5].tolist())
    return out


def topological_order_reference(
    measured_start: np.ndarray,
    measured_end: np.ndarray,
    node_type: np.ndarray,
    sp_ptr: np.ndarray,
    sp_src: np.ndarray,
    ep_ptr: np.ndarray,
    ep_src: np.ndarray,
) -> np.ndarray:
    """:func:`topological_order` in numpy and ``heapq``."""
    n = len(node_type)
    key = order_key(measured_start, measured_end, ep_ptr)
    tie = (node_type == NodeType.JOIN).astype(np.int8)
    order = np.lexsort((np.arange(n, dtype=np.int32), tie, key))
    del tie
    if _is_topological(order, sp_ptr, sp_src, ep_ptr, ep_src):
        return order.astype(np.int32)
    del order
    ids = np.arange(n, dtype=np.int32)
    dst = np.concatenate([np.repeat(ids, np.diff(sp_ptr)), np.repeat(ids, np.diff(ep_ptr))])
    del ids
    return kahn_reference(n, np.concatenate([sp_src, ep_src]).astype(np.int32), dst, key)


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


def dependency_order(
    sp_ptr: np.ndarray, sp_src: np.ndarray, ep_ptr: np.ndarray, ep_src: np.ndarray
) -> np.ndarray:
    """Topological order of a graph without measured times (a rebuilt one): Kahn's algorithm
    preferring lower node ids."""
    n = len(sp_ptr) - 1
    if jit.ENABLED and _in_range(n, sp_src, ep_src):
        ptr, succ, deg = kernels.successor_lists(
            np.ascontiguousarray(sp_ptr, np.int64),
            np.ascontiguousarray(sp_src),
            np.ascontiguousarray(ep_ptr, np.int64),
            np.ascontiguousarray(ep_src),
        )
        out, deg = kernels.kahn_ranked(np.arange(n, dtype=np.int32), ptr, succ, deg)
        if len(out) < n:
            raise _cycle_error(n, len(out), np.flatnonzero(deg > 0)[:5].tolist())
        return out
    ids = np.arange(n)
    dst = np.concatenate([np.repeat(ids, np.diff(sp_ptr)), np.repeat(ids, np.diff(ep_ptr))])
    return kahn_reference(n, np.concatenate([sp_src, ep_src]), dst, ids.astype(np.int64))


def kahn(n: int, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Topological order preferring earlier ``key``, then lower ids; raises GraphError on a cycle.

    Runs the compiled loop (:func:`lumos_core.graph.kernels.kahn_ranked`); :func:`kahn_reference`
    is the same algorithm on ``heapq``, used without numba and by the tests."""
    if not jit.ENABLED or not _in_range(n, src, dst):
        return kahn_reference(n, src, dst, key)
    deg = np.bincount(dst, minlength=n).astype(np.int32)
    succ = dst[stable_order_by_node(n, src)].astype(np.int32)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    by_key = np.argsort(np.asarray(key, np.int64), kind="stable").astype(np.int32)
    out, deg = kernels.kahn_ranked(by_key, ptr, succ, deg)
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
