"""The one way to make an :class:`ExecutionGraph`: from node columns and dependency lists, for a
traced graph (measured times known: they give the order) or a rebuilt one (no measured times: the
order comes from the dependencies alone)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.errors import GraphError
from lumos_core.graph.model import ExecutionGraph, GraphOrigin
from lumos_core.graph.order import csr, cycle_message, dependency_order, narrow_ptr, topological_order
from lumos_core.trace.model import Job


@dataclass
class Dependencies:
    """Dependency lists in any order (one entry per edge); ``from_end``: the source's end, else its
    start; ``kind``: EdgeKind."""

    src: np.ndarray
    dst: np.ndarray
    lag: np.ndarray
    from_end: np.ndarray
    kind: np.ndarray

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(dst, src, lag, from_end, kind), handed over: the lists are left empty, so that once they
        are laid out by destination nobody holds them twice."""
        out = (self.dst, self.src, self.lag, self.from_end, self.kind)
        none = np.zeros(0, np.int32)
        self.src, self.dst, self.lag = none, none, np.zeros(0, np.int64)
        self.from_end, self.kind = np.zeros(0, bool), np.zeros(0, np.int8)
        return out


def make_graph(
    job: Job,
    *,
    origin: GraphOrigin,
    rank: np.ndarray,
    event: np.ndarray,
    node_type: np.ndarray,
    proc: np.ndarray,
    dur: np.ndarray,
    anchor: np.ndarray,
    start_deps: Dependencies,
    end_deps: Dependencies,
    procs: list[tuple[int, int]],
    arrive_of: np.ndarray,
    measured: tuple[np.ndarray, np.ndarray] | None = None,
    rank_nodes: dict[int, np.ndarray] | None = None,
    unexplained_ns: int = 0,
    notes: list[str] | None = None,
) -> ExecutionGraph:
    """Lay the dependencies out by destination (CSR) and order the nodes. The dependency lists are
    taken over (:meth:`Dependencies.take`): ``start_deps`` and ``end_deps`` are left empty.

    A traced graph needs ``measured`` (start, end per node): measured time is almost a topological
    order. A rebuilt graph must not have it; its order prefers lower node ids."""
    if (origin is GraphOrigin.TRACED) != (measured is not None):
        raise ValueError(f"a {origin.value} graph {'needs' if measured is None else 'has no'} measured times")
    n = len(dur)
    sp_ptr, (s_src, s_lag, s_end, s_kind) = csr(n, *start_deps.take())
    ep_ptr, (e_src, e_lag, e_end, e_kind) = csr(n, *end_deps.take())
    if measured is not None:
        try:
            order = topological_order(measured[0], measured[1], node_type, sp_ptr, s_src, ep_ptr, e_src)
        except GraphError as exc:  # say which file and tasks: node ids mean nothing to a user
            raise GraphError(cycle_message(job, rank, event, exc)) from None
    else:
        order = dependency_order(sp_ptr, s_src, ep_ptr, e_src)
    # Ordering is done with the int64 pointers; the graph keeps them as int32 where they fit.
    sp_ptr, ep_ptr = narrow_ptr(sp_ptr), narrow_ptr(ep_ptr)
    return ExecutionGraph(
        job=job,
        rank=np.asarray(rank, np.int32),
        event=np.asarray(event, np.int32),
        node_type=np.asarray(node_type, np.int8),
        proc=np.asarray(proc, np.int32),
        dur=np.asarray(dur, np.int64),
        anchor=anchor,
        measured_start=None if measured is None else measured[0],
        measured_end=None if measured is None else measured[1],
        sp_ptr=sp_ptr,
        sp_src=s_src,
        sp_lag=s_lag,
        sp_from_end=s_end,
        sp_kind=s_kind,
        ep_ptr=ep_ptr,
        ep_src=e_src,
        ep_lag=e_lag,
        ep_from_end=e_end,
        ep_kind=e_kind,
        order=order,
        procs=procs,
        arrive_of=np.asarray(arrive_of, np.int32),
        origin=origin,
        rank_nodes=rank_nodes if rank_nodes is not None else {},
        unexplained_ns=unexplained_ns,
        notes=notes if notes is not None else [],
    )
