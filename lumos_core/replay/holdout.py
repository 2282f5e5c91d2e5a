"""Out-of-sample ("hold-out") replay: predict an iteration from what the *other* iterations taught.

The graph of the whole trace reproduces every measured start by construction (its lags are
calibrated on them), so an in-sample replay says little. The hold-out replay of iteration *k*:

* the history is fixed: every node of an earlier iteration keeps its measured times (the state the
  GPU and CPU were in when *k* began is known, not predicted);
* everything the graph learns from timing is learned from the other iterations only: the
  dependencies of *k*'s tasks (inferred ones included), their lags, the transfer time of *k*'s
  collectives and the anchors of tasks nothing precedes. They are the dependencies of each task's
  twins (:mod:`lumos_core.replay.twins`) in the other iterations, kept when at least half of those
  twins have them, with the median lag;
* *k*'s own measured task durations are used (CPU operators, kernels, copies);
* then *k* is replayed and compared with its measured iteration time and task starts.

Tasks of *k* without a twin anywhere keep their own dependencies with the median lag of their kind
(counted in ``untwinned``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from lumos_core.errors import GraphError
from lumos_core.graph.model import NO_ANCHOR, EdgeKind, ExecutionGraph, NodeType
from lumos_core.jit import kernel
from lumos_core.replay.twins import Iterations, twin_map

NEVER = -(1 << 60)  # a lag that can never bind: the dependency is ignored
# Dependencies inferred from timing (which task of another thread or stream a task waited for); the
# others follow from program order, correlation ids and collective instances.
_SIMILAR = 0.01  # iterations whose share of k's tasks with a twin is this close to the best one
_INFERRED = np.asarray([EdgeKind.CPU_CROSS, EdgeKind.EVENT_WAIT, EdgeKind.GRAPH], np.int8)


@dataclass
class HoldoutGraph:
    graph: ExecutionGraph  # the held-out iteration's dependencies learned from the others
    k: int  # the held-out iteration (index into Iterations.names)
    learned_from: list[int]
    pinned: np.ndarray  # bool per node: kept at its measured times (earlier iterations)
    tasks: int  # base tasks of iteration k
    untwinned: int  # of which had no twin in any other iteration
    dropped: int  # learned dependencies dropped because they contradict k's program order
    maps: dict[int, np.ndarray]  # per other iteration j: its nodes (and j-1's, j+1's) -> twins around k
    matched: np.ndarray  # bool per node: a task of k with a twin in an iteration it learned from


@dataclass
class _Edges:
    src: np.ndarray
    dst: np.ndarray
    lag: np.ndarray
    from_end: np.ndarray
    kind: np.ndarray
    soft: np.ndarray | None = None  # bool: learned and inferred from timing (may be dropped)

    def take(self, sel: np.ndarray) -> _Edges:
        soft = self.soft[sel] if self.soft is not None else np.zeros(len(self.src[sel]), bool)
        return _Edges(self.src[sel], self.dst[sel], self.lag[sel], self.from_end[sel], self.kind[sel], soft)

    @staticmethod
    def concat(parts: list[_Edges]) -> _Edges:
        return _Edges(
            *(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(_Edges))
        )


def _start_edges(g: ExecutionGraph) -> _Edges:
    return _Edges(g.sp_src.astype(np.int64), g.sp_dst.astype(np.int64), g.sp_lag, g.sp_from_end, g.sp_kind)


def _end_edges(g: ExecutionGraph) -> _Edges:
    return _Edges(g.ep_src.astype(np.int64), g.ep_dst.astype(np.int64), g.ep_lag, g.ep_from_end, g.ep_kind)


def holdout_graph(
    graph: ExecutionGraph, its: Iterations, k: int, *, cpu_work: str = "measured"
) -> HoldoutGraph:
    """The graph to replay iteration ``k`` out of sample (see the module docstring)."""
    n = graph.n_nodes
    region = its.region
    learn = its.neighbours(k)
    maps = {j: _iteration_map(graph, its, j, k) for j in learn}
    pinned = (region < k) & (region >= -1)
    base = graph.node_type <= 2  # CPU, GPU, ARRIVE (JOIN = 3 is derived)
    base &= graph.arrive_of < 0
    tasks_k = np.flatnonzero(base & (region == k))
    present = np.zeros(n, np.int64)  # in how many other iterations a node of k has a twin
    similarity = {}
    for j, m in maps.items():
        nodes = np.flatnonzero((region == j) & (m >= 0))
        present[m[nodes]] += 1
        hit = np.zeros(n, bool)
        hit[m[nodes]] = True
        similarity[j] = float(hit[tasks_k].mean()) if len(tasks_k) else 0.0
    untwinned = int(np.count_nonzero(present[tasks_k] == 0))
    # Iterations need not run the same program (an optimizer that alternates its work every other
    # step): timing-inferred dependencies are learned from the iterations whose tasks match k's best.
    best = max(similarity.values(), default=0.0)
    closest = {j: m for j, m in maps.items() if similarity[j] >= best - _SIMILAR}
    present_closest = np.zeros(n, np.int64)
    for j, m in closest.items():
        nodes = np.flatnonzero((region == j) & (m >= 0))
        present_closest[m[nodes]] += 1

    parts_sp, parts_ep = [], []
    for edges, parts in ((_start_edges(graph), parts_sp), (_end_edges(graph), parts_ep)):
        in_scope = _scope(region, edges, k)
        parts.append(edges.take(~in_scope & ~pinned[edges.dst]))
        votes = _votes(edges, region, maps, in_scope)
        # Structural dependencies (program order, launches, syncs, collectives) are k's own; only
        # their lags are learned.
        structural = edges.take(in_scope & _is_structural(edges.kind))
        structural.lag = _learned_lags(structural, votes)
        parts.append(structural)
        # Timing-inferred dependencies are the twins': kept where a strict majority has them.
        near = _votes(edges, region, closest, in_scope)
        inferred = _majority(near.take(~_is_structural(near.kind)), present_closest, graph.proc)
        parts.append(inferred)
    sp = _Edges.concat(parts_sp)
    ep = _Edges.concat(parts_ep)

    dur = graph.dur.copy()
    anchor = graph.anchor.copy()
    _learn_transfer_times(graph, region, maps, k, dur)
    _learn_anchors(graph, its, maps, k, anchor)
    pin = np.flatnonzero(pinned)
    anchor[pin] = graph.measured_start[pin]
    dur[pin] = graph.measured_end[pin] - graph.measured_start[pin]

    sp, ep, order, dropped = _break_cycles(graph.order, n, sp, ep)
    _restore_cpu_gaps(graph, region, maps, k, sp, own=cpu_work == "measured")
    sp_ptr, sp = _csr(n, sp)
    ep_ptr, ep = _csr(n, ep)
    g = dataclasses.replace(
        graph,
        dur=dur,
        anchor=anchor,
        sp_ptr=sp_ptr,
        sp_src=sp.src.astype(np.int32),
        sp_lag=sp.lag,
        sp_from_end=sp.from_end,
        sp_kind=sp.kind,
        ep_ptr=ep_ptr,
        ep_src=ep.src.astype(np.int32),
        ep_lag=ep.lag,
        ep_from_end=ep.from_end,
        ep_kind=ep.kind,
        order=order,
    )
    return HoldoutGraph(g, k, learn, pinned, len(tasks_k), untwinned, dropped, maps, (present > 0) & (region == k))


def _iteration_map(graph: ExecutionGraph, its: Iterations, j: int, k: int) -> np.ndarray:
    """Nodes of iterations j-1, j, j+1 -> their twins in k-1, k, k+1."""
    out = np.full(graph.n_nodes, -1, np.int64)
    for d in (-1, 0, 1):
        a, b = j + d, k + d
        if -1 <= a < its.count and -1 <= b < its.count and a != b:
            out = np.maximum(out, twin_map(graph, its, a, b))
    return out


def _scope(region: np.ndarray, e: _Edges, k: int) -> np.ndarray:
    """Dependencies learned for iteration k: those into its tasks."""
    return region[e.dst] == k


def _is_structural(kind: np.ndarray) -> np.ndarray:
    return ~np.isin(kind, _INFERRED)


def _votes(edges: _Edges, region: np.ndarray, maps: dict[int, np.ndarray], own: np.ndarray) -> _Edges:
    """Every other iteration's dependencies mapped onto iteration k (one row per iteration that has
    it). ``own`` marks k's own dependencies, which never teach anything."""
    src, dst, lag, fe, kind = [], [], [], [], []
    for j, m in maps.items():
        sel = (region[edges.dst] == j) & ~own
        s = m[edges.src[sel]]
        d = m[edges.dst[sel]]
        ok = (s >= 0) & (d >= 0)
        src.append(s[ok])
        dst.append(d[ok])
        lag.append(edges.lag[sel][ok])
        fe.append(edges.from_end[sel][ok])
        kind.append(edges.kind[sel][ok])
    if not src:
        return edges.take(np.zeros(len(edges.src), bool))
    return _Edges(*(np.concatenate(x) for x in (src, dst, lag, fe, kind)))


def group_median(keys: list[np.ndarray], values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group rows by ``keys``: (the row with the median value per group, rows per group, median)."""
    order = np.lexsort((values, *keys[::-1]))
    ks = [k[order] for k in keys]
    v = values[order]
    new = np.zeros(len(v), bool)
    new[:1] = True
    for k in ks:
        new[1:] |= k[1:] != k[:-1]
    first = np.flatnonzero(new)
    count = np.diff(np.r_[first, len(v)])
    median = (v[first + (count - 1) // 2] + v[first + count // 2]) // 2
    return order[first + (count - 1) // 2], count, median


def _majority(votes: _Edges, present: np.ndarray, proc: np.ndarray) -> _Edges:
    """Dependencies a strict majority of the iterations where the task has a twin agree on, with
    the median lag. A cross-thread wait must name the very same source task (threads such as poll
    loops are irregular, position on them says little); an event wait names the source stream (which
    collective a stream waited for is inferred from timing and may differ), and the source of the
    median vote stands for it."""
    if len(votes.src) == 0:
        return votes.take(np.zeros(0, np.int64))
    by_stream = votes.kind == EdgeKind.EVENT_WAIT
    who = np.where(by_stream, -2 - proc[votes.src].astype(np.int64), votes.src)
    rep, count, median = group_median(
        [votes.dst, who, votes.kind.astype(np.int64), votes.from_end.astype(np.int64)], votes.lag
    )
    keep = 2 * count > present[votes.dst[rep]]
    out = votes.take(rep[keep])
    out.lag = median[keep]
    out.soft = np.ones(len(out.src), bool)
    return out


def _learned_lags(edges: _Edges, votes: _Edges) -> np.ndarray:
    """The lag of each of k's own dependencies: the median over the twins' same dependency (same
    source twin), else over the twins' dependencies of that kind into the task, else the median of
    the kind."""
    lag = np.full(len(edges.src), NEVER, np.int64)
    if len(votes.src) == 0 or len(edges.src) == 0:
        return np.where(lag == NEVER, edges.lag, lag)
    kind = votes.kind.astype(np.int64)
    for keys_e, keys_v in (
        ([edges.dst, edges.src, edges.kind.astype(np.int64)], [votes.dst, votes.src, kind]),
        ([edges.dst, edges.kind.astype(np.int64)], [votes.dst, kind]),
        ([edges.kind.astype(np.int64)], [kind]),
    ):
        rep, _count, median = group_median(keys_v, votes.lag)
        todo = np.flatnonzero(lag == NEVER)
        if len(todo) == 0:
            break
        found, at = lookup([k[rep] for k in keys_v], [k[todo] for k in keys_e])
        lag[todo[found]] = median[at[found]]
    return np.where(lag == NEVER, edges.lag, lag)


def lookup(table: list[np.ndarray], query: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Where each query row (columns ``query``) is among the distinct rows of ``table``: (found,
    index into table). A sort-based join, O(n log n): the columns are packed into one int64 key
    when their ranges allow it (always, for node ids and edge kinds), else compared row-wise."""
    n = len(table[0])
    cols = [np.r_[t, q].astype(np.int64) for t, q in zip(table, query)]
    key = _packed(cols)
    if key is None:
        _u, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        key = inv.reshape(-1).astype(np.int64)
    tk, qk = key[:n], key[n:]
    order = np.argsort(tk, kind="stable")
    at = np.searchsorted(tk[order], qk)
    at_c = np.minimum(at, max(n - 1, 0))
    found = (at < n) & (tk[order][at_c] == qk) if n else np.zeros(len(qk), bool)
    return found, np.where(found, order[at_c], -1)


def _packed(cols: list[np.ndarray]) -> np.ndarray | None:
    """The columns as one int64 per row, or None when their ranges do not fit in 62 bits."""
    key = np.zeros(len(cols[0]), np.int64)
    bits = 0
    for c in cols:
        lo = int(c.min(initial=0))
        width = int(c.max(initial=0)) - lo + 1
        b = max(width - 1, 1).bit_length()
        bits += b
        if bits > 62:
            return None
        key = (key << b) | (c - lo)
    return key


def _restore_cpu_gaps(
    graph: ExecutionGraph, region: np.ndarray, maps: dict[int, np.ndarray], k: int, sp: _Edges, own: bool
) -> None:
    """A thread's pause is CPU work unless the thread waited for another one (then the cross-thread
    dependency explains it and the same-thread lag is 0). Where the learned graph of k has no such
    wait, the pause is the twins' median pause, or with ``own`` k's own measured pause (the self
    time of the operators around the tasks: CPU work of k, like its task durations)."""
    thread = np.flatnonzero(graph.sp_kind == EdgeKind.CPU_THREAD)
    src, dst = graph.sp_src[thread].astype(np.int64), graph.sp_dst[thread]
    keys, gaps = [], []
    for j, m in maps.items():
        sel = (region[dst] == j) & (m[dst] >= 0)
        keys.append(m[dst[sel]])
        gaps.append(graph.measured_start[dst[sel]] - graph.measured_end[src[sel]])
    if not keys:
        return
    gap = np.full(graph.n_nodes, NEVER, np.int64)
    if own:
        gap[dst] = graph.measured_start[dst] - graph.measured_end[src]
    else:
        for node, value in _medians(np.concatenate(keys), np.concatenate(gaps)):
            gap[node] = value
    waited = np.zeros(graph.n_nodes, bool)
    waited[sp.dst[sp.kind == EdgeKind.CPU_CROSS]] = True
    fix = (sp.kind == EdgeKind.CPU_THREAD) & (region[sp.dst] == k) & ~waited[sp.dst]
    fix &= gap[sp.dst] != NEVER
    sp.lag = np.where(fix, gap[sp.dst] if own else np.maximum(sp.lag, gap[sp.dst]), sp.lag)


def _learned_durations(graph: ExecutionGraph) -> np.ndarray:
    """Nodes whose duration is learned, not k's own: a collective's transfer (its end minus the last
    arrival), or, where ranks are not joined, the whole collective kernel (waiting included)."""
    learned = graph.arrive_of >= 0
    plain = np.flatnonzero((graph.node_type == NodeType.GPU) & (graph.arrive_of < 0) & (graph.event >= 0))
    if len(plain) and not np.any(graph.node_type == NodeType.JOIN):
        for t in graph.job.ranks:
            mine = plain[graph.rank[plain] == t.rank]
            comm = np.zeros(len(t), bool)
            comm[t.collectives.event] = True
            learned[mine[comm[graph.event[mine]]]] = True
    return learned


def _learn_transfer_times(
    graph: ExecutionGraph, region: np.ndarray, maps: dict[int, np.ndarray], k: int, dur: np.ndarray
) -> None:
    """A collective's transfer time is learned from its twins (k's own would tell where k ends)."""
    xfer = np.flatnonzero(_learned_durations(graph))
    dst, val = [], []
    for j, m in maps.items():
        x = xfer[(region[xfer] == j) & (m[xfer] >= 0)]
        dst.append(m[x])
        val.append(graph.dur[x])
    if not dst:
        return
    d, v = np.concatenate(dst), np.concatenate(val)
    for node, value in _medians(d, v):
        dur[node] = value
    learned = np.zeros(len(dur), bool)
    learned[d] = True
    own = xfer[(region[xfer] == k) & ~learned[xfer]]
    if len(own) and len(v):  # a collective no other iteration has: the typical transfer time
        dur[own] = int(np.median(v))


def _learn_anchors(
    graph: ExecutionGraph, its: Iterations, maps: dict[int, np.ndarray], k: int, anchor: np.ndarray
) -> None:
    """A task nothing precedes starts where its twins started, relative to their iteration."""
    fixed = np.flatnonzero((graph.anchor != NO_ANCHOR) & (its.region >= 0))
    dst, off = [], []
    for j, m in maps.items():
        x = fixed[(its.region[fixed] == j) & (m[fixed] >= 0)]
        for r in np.unique(graph.rank[x]).tolist():
            w = its.windows.get((r, j))
            if w is None:
                continue
            xr = x[graph.rank[x] == r]
            dst.append(m[xr])
            off.append(graph.anchor[xr] - w.start)
    if not dst:
        return
    for node, value in _medians(np.concatenate(dst), np.concatenate(off)):
        w = its.windows.get((int(graph.rank[node]), k))
        if w is not None and its.region[node] == k:
            anchor[node] = w.start + value


def _medians(keys: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    if len(keys) == 0:
        return []
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    count = np.diff(np.r_[first, len(k)])
    median = (v[first + (count - 1) // 2] + v[first + count // 2]) // 2
    return list(zip(k[first].tolist(), median.tolist()))


def _csr(n: int, e: _Edges) -> tuple[np.ndarray, _Edges]:
    order = np.argsort(e.dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(e.dst, minlength=n), out=ptr[1:])
    return ptr, e.take(order)


def _break_cycles(
    previous: np.ndarray, n: int, sp: _Edges, ep: _Edges
) -> tuple[_Edges, _Edges, np.ndarray, int]:
    """A topological order of the hold-out graph. A dependency learned from another iteration and
    inferred from its timing (a cross-thread wait, an event wait, a sync) can contradict the held-out
    iteration's own program order when the iterations differ (a helper thread that ran earlier in
    one of them): such dependencies on a cycle are dropped (counted), never the program order."""
    dropped = 0
    while True:
        order, stuck = _topological(previous, n, np.r_[sp.src, ep.src], np.r_[sp.dst, ep.dst])
        if order is not None:
            return sp, ep, order, dropped
        comp = _cycle_members(stuck, np.r_[sp.src, ep.src], np.r_[sp.dst, ep.dst])
        bad_sp = sp.soft & (comp[sp.src] >= 0) & (comp[sp.src] == comp[sp.dst])
        bad_ep = ep.soft & (comp[ep.src] >= 0) & (comp[ep.src] == comp[ep.dst])
        count = int(bad_sp.sum() + bad_ep.sum())
        if count == 0:
            raise GraphError(f"the hold-out graph has a cycle ({int(stuck.sum())} tasks can never start)")
        dropped += count
        sp, ep = sp.take(~bad_sp), ep.take(~bad_ep)


def _cycle_members(stuck: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Per node: an id of its strongly connected component among the stuck nodes if that component
    is a cycle, else -1."""
    import networkx as nx

    n = len(stuck)
    inside = np.zeros(n, bool)
    inside[stuck] = True
    sel = inside[src] & inside[dst]
    g = nx.DiGraph()
    g.add_edges_from(zip(src[sel].tolist(), dst[sel].tolist()))
    out = np.full(n, -1, np.int64)
    for i, comp in enumerate(nx.strongly_connected_components(g)):
        if len(comp) > 1:
            out[list(comp)] = i
    return out


def _topological(
    previous: np.ndarray, n: int, src: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray]:
    """(order, []) — the full graph's order when it still is one, else Kahn's — or (None, stuck
    nodes mask) on a cycle. Any topological order gives the same replay."""
    pos = np.empty(n, np.int64)
    pos[previous] = np.arange(n)
    if not np.any(pos[src] >= pos[dst]):
        return previous, np.zeros(n, bool)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    by_src = np.argsort(src, kind="stable")
    succ = np.ascontiguousarray(dst[by_src], np.int64)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    queue, count, deg = kahn(np.ascontiguousarray(previous, np.int64), ptr, succ, indeg)
    if count < n:
        return None, deg > 0
    return queue.astype(np.int32), np.zeros(n, bool)


@kernel
def kahn(seed, ptr, succ, indeg):  # type: ignore[no-untyped-def]
    """Kahn's topological order, the ready nodes seeded in the order ``seed`` (compiled: a per-node
    loop). Returns (order buffer, how many nodes it ordered, remaining in-degrees)."""
    n = len(indeg)
    deg = indeg.copy()
    queue = np.empty(n, np.int64)
    tail = 0
    for i in range(len(seed)):
        v = seed[i]
        if deg[v] == 0:
            queue[tail] = v
            tail += 1
    head = 0
    while head < tail:
        v = queue[head]
        head += 1
        for j in range(ptr[v], ptr[v + 1]):
            w = succ[j]
            deg[w] -= 1
            if deg[w] == 0:
                queue[tail] = w
                tail += 1
    return queue, tail, deg
