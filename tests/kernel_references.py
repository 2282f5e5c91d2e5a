"""The Python references of the compiled kernels: one independent version of each algorithm, kept
with the tests (not in the product) and compared bit for bit with the kernels
(``lumos_core/graph/kernels.py``, ``lumos_core/replay/kernels.py``) on random inputs
(tests/test_kernels.py, tests/test_event_wait_vectorised.py) and, through :func:`use_references`, on
whole jobs (every array of the graph, every replayed time and critical path).

They are written differently from the kernels on purpose - numpy expressions, ``heapq``, flat
Python lists, one node at a time - so that a mistake in a kernel does not repeat here. The product
itself has one copy of each algorithm: the kernel (compiled by numba, or run as plain Python with
``LUMOS_JIT=0``).
"""

from __future__ import annotations

import heapq
import sys

import numpy as np
import pytest

from lumos_core.graph import calibrate, order
from lumos_core.graph.edges import event_wait
from lumos_core.graph.edges.cuda_sync import find_sorted, stream_wait_targets
from lumos_core.graph.edges.event_wait import ROUNDS, Launches, waits_by_stream
from lumos_core.graph.model import NO_ANCHOR, EdgeKind, ExecutionGraph, NodeType
from lumos_core.graph.nodes import QUEUED_GAP_NS, RankNodes, previous_end_on_stream
from lumos_core.graph.order import cycle_error, order_key
from lumos_core.replay import run, simulate
from lumos_core.replay.breakdown import Window
from lumos_core.replay.run import CriticalPath
from lumos_core.replay.simulate import binding_end_predecessor, binding_predecessor
from lumos_core.trace.kineto_schema import EVENT_RECORD_CALLS, STREAM_WAIT_CALLS
from lumos_core.trace.model import Kind, RankTrace


def calibrate_start_lags_reference(
    node: dict[str, np.ndarray],
    src: np.ndarray,
    dst: np.ndarray,
    lag: np.ndarray,
    from_end: np.ndarray,
    anchor: np.ndarray,
    absorb: bool,
) -> tuple[np.ndarray, int]:
    """:func:`calibrate_start_lags` in numpy."""
    if len(src) == 0:
        return lag, 0
    t_src = np.where(from_end, node["me"][src], node["ms"][src])
    bound = t_src + lag
    target = node["ms"][dst]
    # Too tight: the task started earlier than this edge allows (clock fuzz, a wrong inference).
    lag = np.where(bound > target, lag - (bound - target), lag)
    bound = t_src + lag
    n = len(node["dur"])
    best = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(best, dst, bound)
    # Too loose: nothing explains the start; attach the delay to the binding edge (the latest bound).
    delay = np.where(best > np.iinfo(np.int64).min // 2, node["ms"] - best, 0)
    delay = np.maximum(delay, 0)
    delay[anchor != NO_ANCHOR] = 0
    is_best = bound == best[dst]
    first_best = np.zeros(len(src), bool)
    cand = np.flatnonzero(is_best)
    _, first = np.unique(dst[cand], return_index=True)
    first_best[cand[first]] = True
    if absorb:
        lag = lag + np.where(first_best, delay[dst], 0)
    gpu_like = node["type"] != NodeType.CPU
    return lag, int(delay[gpu_like].sum())


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
    if is_topological(order, sp_ptr, sp_src, ep_ptr, ep_src):
        return order.astype(np.int32)
    del order
    ids = np.arange(n, dtype=np.int32)
    dst = np.concatenate([np.repeat(ids, np.diff(sp_ptr)), np.repeat(ids, np.diff(ep_ptr))])
    del ids
    return kahn_reference(n, np.concatenate([sp_src, ep_src]).astype(np.int32), dst, key)


def is_topological(
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
        raise cycle_error(n, len(out), [v for v in range(n) if deg[v] > 0][:5])
    return np.asarray(out, np.int32)


def waits_recorded_over_reference(
    src: np.ndarray,
    dst: np.ndarray,
    rec_ts: np.ndarray,
    wait_ts: np.ndarray,
    stream_lane: np.ndarray,
    launch_ts: np.ndarray,
    act_start: np.ndarray,
    act_end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`waits_recorded_over` in numpy, a round of pairs at a time."""
    order, key_lane, key_ts = waits_by_stream(dst, wait_ts, stream_lane)
    # a pair (a, b) of launch indices as one number, ordered as the pairs are
    width = len(launch_ts)
    seen = np.unique(src * width + dst)
    out_src, out_dst, out_lag = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    new_src, new_dst, new_cap = src, dst, rec_ts
    for _ in range(ROUNDS):
        lane_a = stream_lane[new_src]
        lo = search_in_lanes(key_lane, key_ts, lane_a, launch_ts[new_src], "right")
        hi = search_in_lanes(key_lane, key_ts, lane_a, new_cap, "left")
        n = np.maximum(hi - lo, 0)
        if not n.any():
            break
        pair = np.repeat(np.arange(len(new_src)), n)
        first = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
        via = order[first]  # the wait recorded over
        cand_src, cand_dst, cand_cap = src[via], new_dst[pair], new_cap[pair]
        cand_key = cand_src * width + cand_dst
        keep = (stream_lane[cand_src] != stream_lane[cand_dst]) & (find_sorted(seen, cand_key) < 0)
        cand_key, cand_cap = cand_key[keep], cand_cap[keep]
        if len(cand_key) == 0:
            break
        uniq, first_of = np.unique(cand_key, return_index=True)  # first of each pair, pairs in order
        cand_src, cand_dst, cand_cap = uniq // width, uniq % width, cand_cap[first_of]
        seen = np.union1d(seen, uniq)
        out_src.append(cand_src)
        out_dst.append(cand_dst)
        out_lag.append(np.clip(act_start[cand_dst] - act_end[cand_src], 0, QUEUED_GAP_NS))
        new_src, new_dst, new_cap = cand_src, cand_dst, cand_cap
    return np.concatenate(out_src), np.concatenate(out_dst), np.concatenate(out_lag)


def search_in_lanes(
    key_lane: np.ndarray, key_ts: np.ndarray, lane: np.ndarray, ts: np.ndarray, side: str
) -> np.ndarray:
    """Per query: the position of ``ts`` among the waits into ``lane`` (keys sorted by lane, then time).

    (lane, time) becomes one sortable number, lane * span + time, where the span covers every time
    involved; a loop over lanes where that would not fit in 63 bits."""
    if len(key_ts) == 0 or len(ts) == 0:
        return np.searchsorted(key_lane, lane, side).astype(np.int64)  # type: ignore[no-any-return]
    lo = min(int(key_ts.min()), int(ts.min()))
    span = max(int(key_ts.max()), int(ts.max())) - lo + 1
    top = max(int(key_lane.max()), int(lane.max())) + 1
    if min(int(key_lane.min()), int(lane.min())) >= 0 and top * span < 2**62:
        keys = key_lane.astype(np.int64) * span + (key_ts - lo)
        return np.searchsorted(keys, lane.astype(np.int64) * span + (ts - lo), side).astype(np.int64)  # type: ignore[no-any-return]
    out = np.empty(len(lane), np.int64)
    for ln in np.unique(lane).tolist():
        q = lane == ln
        a = int(np.searchsorted(key_lane, ln, "left"))
        b = int(np.searchsorted(key_lane, ln, "right"))
        out[q] = a + np.searchsorted(key_ts[a:b], ts[q], side)
    return out


def event_wait_pairs_reference(
    t: RankTrace, rn: RankNodes, waits: np.ndarray, launches: Launches, typical_latency: int
) -> tuple[list[int], list[int], list[int], list[int], list[int], int]:
    """:func:`event_wait_pairs` in Python, one wait at a time."""
    launch_nodes, launch_ts, launch_lane, stream_lane = launches
    node_ev = rn.events[launch_nodes - rn.base]
    act_start = t.start[node_ev]
    act_end = act_start + t.dur[node_ev]
    launch_of = t.launch[node_ev]
    launch_end = t.start[launch_of] + t.dur[launch_of]
    prev_end_on_stream = previous_end_on_stream(t, node_ev)
    record_mask = t.names_matching(EVENT_RECORD_CALLS.__contains__)
    exact = stream_wait_sync_events(t)
    record_by_corr = {
        int(t.correlation[i]): i for i in np.flatnonzero(record_mask[t.name] & (t.kind == Kind.RUNTIME))
    }
    srcs: list[int] = []
    dsts: list[int] = []
    lags: list[int] = []
    recs: list[int] = []
    wts: list[int] = []
    inferred = 0
    for w in waits.tolist():
        ts = int(t.start[w])
        after = int(np.searchsorted(launch_ts, ts, side="right"))
        info = exact.get(int(t.correlation[w]))
        src_idx = -1
        rec_ts = ts
        if info is not None:
            dest_lane, src_lane, rec_corr = info
            if src_lane < 0:  # it waits on a stream that ran nothing in the trace: nothing to wait for
                continue
            rec = record_by_corr.get(rec_corr, -1)
            if rec >= 0 and int(t.start[rec]) > ts:
                rec = -1  # a wait cannot wait for a record issued after it (reused or corrupt id)
            if rec >= 0:
                rec_ts = int(t.start[rec])
            cut = after if rec < 0 else int(np.searchsorted(launch_ts, int(t.start[rec]), side="right"))
            on_src = np.flatnonzero(stream_lane[:cut] == src_lane)
            if len(on_src):
                src_idx = int(on_src[-1])
            on_dst = np.flatnonzero(stream_lane[after:] == dest_lane)
            if len(on_dst) == 0:
                continue
            dst_idx = after + int(on_dst[0])
        else:
            inferred += 1
            mine_after = np.flatnonzero(launch_lane[after:] == t.lane[w])
            if len(mine_after) == 0:
                continue
            dst_idx = after + int(mine_after[0])
            dest_lane = int(stream_lane[dst_idx])
            rec = adjacent_record(t, w, record_mask)
            if rec >= 0:
                rec_ts = int(t.start[rec])
                cut = int(np.searchsorted(launch_ts, int(t.start[rec]), side="right"))
                others = np.flatnonzero(stream_lane[:cut] != dest_lane)
                if len(others):
                    src_lane = int(stream_lane[others[-1]])
                    src_idx = int(np.flatnonzero(stream_lane[:cut] == src_lane)[-1])
            explained = max(int(prev_end_on_stream[dst_idx]), int(launch_end[dst_idx]) + typical_latency)
            if int(act_start[dst_idx]) - explained > QUEUED_GAP_NS:
                # The kernel waited for something: the other-stream work that ended just before it.
                cand = np.flatnonzero(
                    (stream_lane[:after] != dest_lane) & (act_end[:after] <= act_start[dst_idx] + 2_000)
                )
                if len(cand):
                    best = int(cand[np.argmax(act_end[cand])])
                    if src_idx < 0 or act_end[best] > act_end[src_idx]:
                        src_idx = best
        if src_idx < 0 or stream_lane[src_idx] == stream_lane[dst_idx]:
            continue
        srcs.append(src_idx)
        dsts.append(dst_idx)
        # The GPU takes a few µs to see an event complete: keep that latency when it was measured.
        lags.append(min(max(int(act_start[dst_idx] - act_end[src_idx]), 0), QUEUED_GAP_NS))
        recs.append(rec_ts)
        wts.append(ts)
    return srcs, dsts, lags, recs, wts, inferred


def adjacent_record(t: RankTrace, wait: int, record_mask: np.ndarray) -> int:
    """The cudaEventRecord issued together with this wait (same operator, or just before it)."""
    sl = t.lane_slice(int(t.lane[wait]))
    lo = sl.start
    i = wait - 1
    ext = int(t.external_id[wait])
    while i >= lo and int(t.start[wait]) - int(t.start[i]) < 200_000:
        if t.kind[i] == Kind.RUNTIME:
            if record_mask[t.name[i]]:
                same_op = ext >= 0 and int(t.external_id[i]) == ext
                close = int(t.start[wait]) - int(t.start[i] + t.dur[i]) < 20_000
                return i if (same_op or close) else -1
            if t.names_matching is not None and t.strings[int(t.name[i])] in STREAM_WAIT_CALLS:
                return -1  # another wait in between: that record belonged to it
        i -= 1
    return -1


def stream_wait_sync_events(t: RankTrace) -> dict[int, tuple[int, int, int]]:
    """correlation of cudaStreamWaitEvent -> (waiting lane, recorded lane, record correlation)."""
    return stream_wait_targets(t)


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


def node_category(graph: ExecutionGraph, v: int) -> str:
    t = graph.node_type[v]
    if t == NodeType.CPU:
        return "cpu"
    if graph.arrive_of[v] >= 0:
        return "gpu_communication"
    r = graph.job.rank(int(graph.rank[v]))
    e = int(graph.event[v])
    if e >= 0 and np.any(r.collectives.event == e):
        return "gpu_communication"
    return "gpu_compute"


def critical_path_reference(
    graph: ExecutionGraph, start: np.ndarray, end: np.ndarray, rank: int, window: Window
) -> CriticalPath:
    """:func:`critical_path` in plain Python (one node at a time)."""
    mine = np.flatnonzero(
        (graph.rank == rank) & (graph.node_type <= NodeType.GPU) & (end <= window.end) & (end > window.start)
    )
    if len(mine) == 0:
        return CriticalPath(np.zeros(0, np.int64), 0, {})
    v = int(mine[np.argmax(end[mine])])
    t_end = int(end[v])
    nodes: list[int] = []
    cats: dict[str, int] = {}
    guard = 0
    while v >= 0 and guard < 1_000_000:
        guard += 1
        nodes.append(v)
        u, kind = binding_end_predecessor(graph, start, end, v)
        if u >= 0:  # a blocking call that ended when the GPU work it waited for ended
            cats["waiting (sync)"] = cats.get("waiting (sync)", 0) + int(end[v] - max(end[u], start[v]))
            cats[node_category(graph, v)] = cats.get(node_category(graph, v), 0) + int(
                max(end[u], start[v]) - start[v]
            )
            v = u
            continue
        if graph.node_type[v] != NodeType.JOIN:
            cats[node_category(graph, v)] = cats.get(node_category(graph, v), 0) + int(end[v] - start[v])
        if start[v] <= window.start:
            break
        u, kind = binding_predecessor(graph, start, end, v)
        if u < 0:
            break
        ref = end[u] if bool(edge_from_end(graph, u, v)) else start[u]
        gap = int(start[v] - ref)
        if gap:
            label = EdgeKind(kind).name.lower()
            cats[f"lag: {label}"] = cats.get(f"lag: {label}", 0) + gap
        v = u
    first = nodes[-1]
    length = t_end - max(int(start[first]), window.start)
    return CriticalPath(np.asarray(nodes[::-1], np.int64), length, cats)


def edge_from_end(graph: ExecutionGraph, u: int, v: int) -> bool:
    a, b = int(graph.sp_ptr[v]), int(graph.sp_ptr[v + 1])
    for j in range(a, b):
        if graph.sp_src[j] == u:
            return bool(graph.sp_from_end[j])
    return True


def place_in_gap_numpy(
    x: np.ndarray,
    k: np.ndarray,
    j: np.ndarray,
    has_n: np.ndarray,
    has_p: np.ndarray,
    ms: np.ndarray,
    ns: np.ndarray,
    me_sorted: np.ndarray,
    ne_sorted: np.ndarray,
) -> np.ndarray:
    """New times of points ``x`` given the next task ``k`` to start (valid where ``has_n``) and the
    last task ``j`` ended (valid where ``has_p``): moved with the next task, else with the previous
    one, and interpolated across the gap where both exist and the gap is real.

    The numpy form of :func:`lumos_core.replay.kernels.place_in_gap`, which the replay runs (one
    pass, no temporaries); kept as the reference the tests compare the kernel with."""
    by_next = x + (ns[k] - ms[k])
    by_prev = x + (ne_sorted[j] - me_sorted[j])
    out = np.where(has_n, by_next, by_prev)
    both = has_n & has_p
    if both.any():
        g_old = (ms[k] - me_sorted[j]).astype(np.float64)
        g_new = (ns[k] - ne_sorted[j]).astype(np.float64)
        ok = both & (g_old > 0) & (g_new >= 0)
        frac = np.where(ok, (x - me_sorted[j]) / np.where(g_old > 0, g_old, 1.0), 0.0)
        interp = ne_sorted[j] + np.rint(frac * g_new).astype(np.int64)
        out = np.where(ok, interp, out)
    return out


def stable_order_by_node_reference(n: int, ids: np.ndarray) -> np.ndarray:
    """:func:`lumos_core.graph.order.stable_order_by_node` in numpy."""
    return np.argsort(ids, kind="stable")


def dependency_order_reference(
    sp_ptr: np.ndarray, sp_src: np.ndarray, ep_ptr: np.ndarray, ep_src: np.ndarray
) -> np.ndarray:
    """:func:`lumos_core.graph.order.dependency_order` on ``heapq``: Kahn preferring lower ids."""
    n = len(sp_ptr) - 1
    ids = np.arange(n)
    dst = np.concatenate([np.repeat(ids, np.diff(sp_ptr)), np.repeat(ids, np.diff(ep_ptr))])
    return kahn_reference(n, np.concatenate([sp_src, ep_src]), dst, ids.astype(np.int64))


def critical_path_with_context(  # type: ignore[no-untyped-def]
    graph: ExecutionGraph, start: np.ndarray, end: np.ndarray, rank: int, window: Window, *, context=None
) -> CriticalPath:
    """:func:`critical_path_reference` with the product's signature (the context is the kernel's)."""
    return critical_path_reference(graph, start, end, rank, window)


# (module, function) of the product -> its reference, for whole-job comparisons.
REFERENCES = {
    (calibrate, "calibrate_start_lags"): calibrate_start_lags_reference,
    (order, "csr"): csr_reference,
    (order, "topological_order"): topological_order_reference,
    (order, "dependency_order"): dependency_order_reference,
    (order, "kahn"): kahn_reference,
    (order, "stable_order_by_node"): stable_order_by_node_reference,
    (event_wait, "event_wait_pairs"): event_wait_pairs_reference,
    (event_wait, "waits_recorded_over"): waits_recorded_over_reference,
    (simulate, "simulate"): simulate_reference,
    (run, "critical_path"): critical_path_with_context,
}


def use_references(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the pipeline on the references instead of the kernels (until ``monkeypatch`` undoes it):
    each product function is replaced in its module and in every ``lumos_core`` module that imported
    it by name."""
    for (module, name), ref in REFERENCES.items():
        original = getattr(module, name)
        holders = [
            m
            for m in list(sys.modules.values())
            if m is not None and m.__name__.startswith("lumos_core") and getattr(m, name, None) is original
        ]
        assert module in holders, f"{module.__name__}.{name} is not the function the references replace"
        for m in holders:
            monkeypatch.setattr(m, name, ref)
