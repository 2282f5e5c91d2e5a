"""Which iteration each graph node belongs to, and which node plays the same part in another iteration.

An iteration of a rank is its measured ``ProfilerStep#N`` window (:func:`iteration_windows`). A CPU
task belongs to the window its measured start falls in; a GPU task to the window its launch call
started in (GPU work launched at the end of one step often runs during the next); a collective's
transfer and join nodes to the iteration of their arrival. Nodes before the first window get -1.

Twins: two iterations run the same program, so a task of iteration *a* has a twin in iteration *b*
at the same place on the same thread or stream. Iterations need not be identical (an optimizer that
alternates its work, a first step that does more, a data-dependent lookup, an extra sync), so the
places are found by aligning the two sequences of task names of every processor, never by timing.
The alignment (:mod:`lumos_core.replay.align`) is a patience-style diff in O(n log n): names that
occur once in both sequences anchor it, the anchors split the rest into segments where more names
become unique, and what is left is paired by occurrence. Tasks with no counterpart have no twin. A
collective's transfer and join nodes follow the twin of their arrival node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.replay.align import align
from lumos_core.replay.breakdown import Window, iteration_windows
from lumos_core.trace.kineto_schema import profiler_step

# An iteration is learned from (and compared with) at most this many others, the nearest first, so
# that a trace of K iterations costs O(K) alignments, not O(K^2) (and nearby steps are the ones a
# drifting job resembles most).
NEIGHBOURS = 4


@dataclass
class Iterations:
    """The iterations of a graph: names in order, the iteration of every node, measured windows."""

    names: list[str]  # iteration names in step order, shared by all ranks
    region: np.ndarray  # int32 per node: index into names, -1 before the first iteration
    windows: dict[tuple[int, int], Window]  # (rank, iteration index) -> measured window
    _pair_cache: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    _keys: np.ndarray | None = field(default=None, repr=False)

    @property
    def count(self) -> int:
        return len(self.names)

    def ranks_of(self, k: int) -> list[int]:
        return sorted(r for r, i in self.windows if i == k)

    def forget(self, below: int) -> None:
        """Drop the cached twin maps between iterations all before ``below`` (each map is one int64
        per graph node: a long trace would otherwise keep O(K) of them)."""
        for key in [key for key in self._pair_cache if max(key) < below]:
            del self._pair_cache[key]

    def neighbours(self, k: int) -> list[int]:
        """The iterations ``k`` learns from: the NEIGHBOURS nearest others (earlier first on ties)."""
        others = sorted((j for j in range(self.count) if j != k), key=lambda j: (abs(j - k), j))
        return sorted(others[:NEIGHBOURS])


def iterations_of(graph: ExecutionGraph) -> Iterations:
    """Assign every node of ``graph`` to an iteration (see the module docstring)."""
    per_rank = {t.rank: iteration_windows(t) if t.iterations else [] for t in graph.job.ranks}
    names = sorted(
        {w.name for ws in per_rank.values() for w in ws},
        key=lambda s: (profiler_step(s) if profiler_step(s) is not None else -1, s),
    )
    index = {n: i for i, n in enumerate(names)}
    region = np.full(graph.n_nodes, -1, np.int32)
    windows: dict[tuple[int, int], Window] = {}
    base = (graph.node_type != NodeType.JOIN) & (graph.arrive_of < 0)
    for t in graph.job.ranks:
        ws = per_rank[t.rank]
        if not ws:
            continue
        for w in ws:
            windows[(t.rank, index[w.name])] = w
        nodes = np.flatnonzero(base & (graph.rank == t.rank))
        ev = graph.event[nodes]
        launch = t.launch[ev]
        gpu = graph.node_type[nodes] != NodeType.CPU
        ref = np.where(gpu & (launch >= 0), t.start[np.maximum(launch, 0)], t.start[ev])
        starts = np.asarray([w.start for w in ws], np.int64)
        pos = np.searchsorted(starts, ref, side="right") - 1
        glob = np.asarray([index[w.name] for w in ws], np.int32)
        region[nodes] = np.where(pos >= 0, glob[np.maximum(pos, 0)], -1)
    xfer = np.flatnonzero(graph.arrive_of >= 0)
    region[xfer] = region[graph.arrive_of[xfer]]
    join_of = join_of_arrive(graph)
    arrives = np.flatnonzero(join_of >= 0)
    joins = join_of[arrives]
    jr = np.full(graph.n_nodes, -1, np.int32)
    np.maximum.at(jr, joins, region[arrives])
    region[joins] = jr[joins]
    return Iterations(names, region, windows)


def join_of_arrive(graph: ExecutionGraph) -> np.ndarray:
    """Per node: the join node an ARRIVE node feeds (-1 for other nodes)."""
    out = np.full(graph.n_nodes, -1, np.int64)
    dst = graph.sp_dst
    sel = (graph.node_type[dst] == NodeType.JOIN) & np.isin(
        graph.sp_kind, [EdgeKind.COLLECTIVE, EdgeKind.P2P]
    )
    out[graph.sp_src[sel]] = dst[sel]
    return out


def twin_map(graph: ExecutionGraph, its: Iterations, a: int, b: int) -> np.ndarray:
    """Per node: its twin in iteration ``b`` for nodes of iteration ``a`` (-1 for no twin or other
    nodes). Cached per pair (the map of (b, a) is the inverse of (a, b))."""
    key = (a, b)
    cached = its._pair_cache.get(key)
    if cached is not None:
        return cached
    out = np.full(graph.n_nodes, -1, np.int64)
    back = its._pair_cache.get((b, a))
    if back is not None:
        src = np.flatnonzero(back >= 0)
        src = src[its.region[src] == b]
        out[back[src]] = src
        its._pair_cache[key] = out
        return out
    base = (graph.node_type != NodeType.JOIN) & (graph.arrive_of < 0)
    in_a = np.flatnonzero(base & (its.region == a))
    in_b = np.flatnonzero(base & (its.region == b))
    if its._keys is None:
        its._keys = _name_keys(graph)
    # Sequences per processor, in node order (a processor's nodes are numbered in time order).
    in_a = in_a[np.argsort(graph.proc[in_a], kind="stable")]
    in_b = in_b[np.argsort(graph.proc[in_b], kind="stable")]
    ia, ib = align(graph.proc[in_a], its._keys[in_a], graph.proc[in_b], its._keys[in_b])
    out[in_a[ia]] = in_b[ib]
    # Derived nodes follow their arrival: transfer nodes, then joins.
    xfer = np.flatnonzero(graph.arrive_of >= 0)
    xfer_of = np.full(graph.n_nodes, -1, np.int64)
    xfer_of[graph.arrive_of[xfer]] = xfer
    xa = xfer[its.region[xfer] == a]
    twin_arrive = out[graph.arrive_of[xa]]
    out[xa] = np.where(twin_arrive >= 0, xfer_of[np.maximum(twin_arrive, 0)], -1)
    join_of = join_of_arrive(graph)
    arr = np.flatnonzero((join_of >= 0) & (its.region == a) & (out >= 0))
    joins = join_of[arr]
    twin_join = join_of[out[arr]]
    ok = twin_join >= 0
    out[joins[ok]] = twin_join[ok]
    its._pair_cache[key] = out
    return out


def _name_keys(graph: ExecutionGraph) -> np.ndarray:
    """A key per node comparable within one processor: its name (interned per rank) and, for GPU
    work, the thread that launched it (-1: launched before the trace began), so that a stream's
    kernels launched by different threads, or before profiling, are told apart."""
    out = np.full(graph.n_nodes, -1, np.int64)
    for t in graph.job.ranks:
        nodes = np.flatnonzero((graph.rank == t.rank) & (graph.event >= 0))
        ev = graph.event[nodes]
        launch = t.launch[ev]
        by = np.where(launch >= 0, t.lane[np.maximum(launch, 0)], -1).astype(np.int64)
        by = np.where(graph.node_type[nodes] == NodeType.CPU, -2, by)
        out[nodes] = t.name[ev].astype(np.int64) * (len(t.lanes) + 2) + by + 2
    return out


# Share of an iteration's tasks that must have a twin in some other iteration for it to be held
# out. Real steps of one program differ a little (data-dependent embedding lookups, allocator
# calls, an extra sync: unseen jobs matched 78-94 %), while a first profiled step that compiles or
# warms up does a different program (nanoGPT's step 10: under 75 %). The held-out figures are then
# scored over the tasks that have a twin (``matched`` in the report).
STEADY_MATCH = 0.75


def steady_iterations(graph: ExecutionGraph, its: Iterations) -> tuple[list[int], dict[int, float]]:
    """Iterations that run the same program as another one: at least STEADY_MATCH of their tasks
    have a twin in one of their neighbouring iterations. Decided from task names only, never from
    timing. Returns the steady iterations and, per iteration, its best share of twinned tasks."""
    share: dict[int, float] = {}
    for k in range(its.count):
        share[k] = twin_share(graph, its, k)
        its.forget(k - NEIGHBOURS - 1)  # later iterations never compare with these again
    return [k for k in range(its.count) if share[k] >= STEADY_MATCH], share


def twin_share(graph: ExecutionGraph, its: Iterations, k: int) -> float:
    """The best share of iteration ``k``'s tasks that have a twin in one neighbouring iteration."""
    base = (graph.node_type != NodeType.JOIN) & (graph.arrive_of < 0)
    mine = np.flatnonzero(base & (its.region == k))
    best = 0.0
    for j in its.neighbours(k) if len(mine) else []:
        m = twin_map(graph, its, k, j)
        best = max(best, float(np.count_nonzero(m[mine] >= 0)) / len(mine))
    return best
