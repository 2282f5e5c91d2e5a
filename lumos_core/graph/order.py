"""Topological order of the graph's nodes (the replay processes them in it), the CSR layout of its
edge lists, and the error that names the tasks of a cycle.

Each is one compiled loop (:mod:`lumos_core.graph.kernels`; plain Python when numba is off); the
tests compare them with independent numpy and ``heapq`` versions (tests/kernel_references.py)."""

from __future__ import annotations

import numpy as np

from lumos_core.errors import GraphError
from lumos_core.graph import kernels
from lumos_core.graph.model import NodeType
from lumos_core.trace.model import Job


def stable_order_by_node(n: int, ids: np.ndarray) -> np.ndarray:
    """``np.argsort(ids, kind="stable")`` for node ids in [0, n) (compiled: a counting sort)."""
    _check_ids(n, ids)
    return kernels.stable_bucket_order(np.ascontiguousarray(ids), n)


def _check_ids(n: int, *ids: np.ndarray) -> None:
    """Raise unless every id is a node in [0, n): the compiled loops index without bounds checks,
    so an id out of range (a bug in whatever made the edges) must stop here, not corrupt memory."""
    for a in ids:
        if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
            raise GraphError(
                f"internal error: node ids {int(a.min())}..{int(a.max())} outside the graph's {n} nodes"
            )


def csr(
    n: int, dst: np.ndarray, src: np.ndarray, lag: np.ndarray, from_end: np.ndarray, kind: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Dependencies laid out by destination: ``ptr`` (n + 1) and (src as int32, lag, from_end, kind)
    in destination order, each destination's edges in their given order."""
    _check_ids(n, dst, src)
    return kernels.csr_edges(  # type: ignore[no-any-return]
        n,
        np.ascontiguousarray(dst),
        np.ascontiguousarray(src),
        np.ascontiguousarray(lag, np.int64),
        np.ascontiguousarray(from_end, bool),
        np.ascontiguousarray(kind, np.int8),
    )


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
    then linear passes while the measured order holds)."""
    n = len(node_type)
    _check_ids(n, sp_src, ep_src)
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
        raise cycle_error(n, len(out), np.flatnonzero(deg > 0)[:5].tolist())
    return out


def dependency_order(
    sp_ptr: np.ndarray, sp_src: np.ndarray, ep_ptr: np.ndarray, ep_src: np.ndarray
) -> np.ndarray:
    """Topological order of a graph without measured times (a rebuilt one): Kahn's algorithm
    preferring lower node ids."""
    n = len(sp_ptr) - 1
    _check_ids(n, sp_src, ep_src)
    ptr, succ, deg = kernels.successor_lists(
        np.ascontiguousarray(sp_ptr, np.int64),
        np.ascontiguousarray(sp_src),
        np.ascontiguousarray(ep_ptr, np.int64),
        np.ascontiguousarray(ep_src),
    )
    out, deg = kernels.kahn_ranked(np.arange(n, dtype=np.int32), ptr, succ, deg)
    if len(out) < n:
        raise cycle_error(n, len(out), np.flatnonzero(deg > 0)[:5].tolist())
    return out


def kahn(n: int, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Topological order preferring earlier ``key``, then lower ids; raises GraphError on a cycle.

    Runs the compiled loop (:func:`lumos_core.graph.kernels.kahn_ranked`)."""
    _check_ids(n, src, dst)
    deg = np.bincount(dst, minlength=n).astype(np.int32)
    succ = dst[stable_order_by_node(n, src)].astype(np.int32)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    by_key = np.argsort(np.asarray(key, np.int64), kind="stable").astype(np.int32)
    out, deg = kernels.kahn_ranked(by_key, ptr, succ, deg)
    if len(out) < n:
        raise cycle_error(n, len(out), np.flatnonzero(deg > 0)[:5].tolist())
    return out


def cycle_error(n: int, done: int, stuck: list[int]) -> GraphError:
    err = GraphError(
        f"the execution graph has a cycle ({n - done} tasks can never start, e.g. nodes "
        f"{stuck}); a cudaStreamWaitEvent or sync was probably paired with the wrong work"
    )
    err.stuck = (n - done, stuck)  # type: ignore[attr-defined]
    return err


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
