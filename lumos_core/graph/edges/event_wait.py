"""``EVENT_WAIT``: cudaEventRecord on one stream -> cudaStreamWaitEvent on another."""

from __future__ import annotations

import numpy as np

from lumos_core import jit
from lumos_core.graph import kernels
from lumos_core.graph.edges.cuda_sync import find_sorted, last_by_key, stream_wait_targets, stream_waits
from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import QUEUED_GAP_NS, RankNodes, launches_by_stream, previous_end_on_stream
from lumos_core.trace.kineto_schema import EVENT_RECORD_CALLS, STREAM_WAIT_CALLS
from lumos_core.trace.model import Kind, RankTrace


def add_event_waits(ctx: RankContext) -> None:
    """cudaEventRecord on stream A, cudaStreamWaitEvent on stream B: B's next work waits for A's last.

    With ``cuda_sync`` events the pairing is exact. Without them (most traces) the waiting stream is
    the stream this thread launches on next, and the recorded work is found in one of two ways:
    when the record call sits right next to the wait (same operator: ProcessGroupNCCL before a
    collective) it is the last work launched on the most recently used other stream; when the record
    is not visible (recorded earlier, elsewhere: ``work.wait()`` on a collective's end event) and the
    waiting kernel started later than its launch and its stream explain, it is the work on another
    stream, launched before the wait, that ended last before that kernel started.
    """
    t, rn, sp, notes, typical_latency = ctx.trace, ctx.nodes, ctx.start_deps, ctx.notes, ctx.launch_latency
    waits = np.flatnonzero(
        (t.kind == Kind.RUNTIME) & t.names_matching(STREAM_WAIT_CALLS.__contains__)[t.name]
    )
    if len(waits) == 0:
        return
    launches = launches_by_stream(t, rn)
    if len(launches[0]) == 0:
        return
    find = event_wait_pairs if jit.ENABLED else event_wait_pairs_reference
    src, dst, lag, rec_ts, wait_ts, inferred = find(t, rn, waits, launches, typical_latency)
    if inferred:
        notes.append(f"inferred-waits {inferred} {len(waits)}")
    src, dst, lag = with_waits_recorded_over(src, dst, lag, rec_ts, wait_ts, t, rn, launches)
    sp.add(launches[0][src], launches[0][dst], lag, True, EdgeKind.EVENT_WAIT)


Launches = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
ROUNDS = 4  # links of a chain of waits followed


def with_waits_recorded_over(
    src: np.ndarray,
    dst: np.ndarray,
    lag: np.ndarray,
    rec_ts: np.ndarray,
    wait_ts: np.ndarray,
    t: RankTrace,
    rn: RankNodes,
    launches: Launches,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add what an event captures besides its stream's last kernel.

    An event recorded on stream A completes when everything queued on A before it has, including a
    cudaStreamWaitEvent issued after A's last kernel (``work.wait()`` on a collective, then the next
    collective's record: the compute stream has run nothing in between). Such a wait made A's *next*
    kernel depend on work X of a third stream; the recorded event depends on X too, so each pair
    (A's last kernel -> D) gains X -> D for every wait into A issued after that kernel's launch and
    before the record. Repeated so that chains of waits are followed.
    Arguments and results are launch indices (:func:`~lumos_core.graph.nodes.launches_by_stream`)."""
    launch_nodes, launch_ts, _, stream_lane = launches
    src, dst, lag = (np.asarray(a, np.int64) for a in (src, dst, lag))
    rec_ts, wait_ts = np.asarray(rec_ts, np.int64), np.asarray(wait_ts, np.int64)
    if len(src) < 2:
        return src, dst, lag
    node_ev = rn.events[launch_nodes - rn.base]
    act_start = t.start[node_ev]
    act_end = act_start + t.dur[node_ev]
    find = waits_recorded_over if jit.ENABLED else waits_recorded_over_reference
    more = find(src, dst, rec_ts, wait_ts, stream_lane, launch_ts, act_start, act_end)
    return np.concatenate([src, more[0]]), np.concatenate([dst, more[1]]), np.concatenate([lag, more[2]])


def _waits_by_stream(dst: np.ndarray, wait_ts: np.ndarray, stream_lane: np.ndarray) -> tuple[np.ndarray, ...]:
    """(order, held stream, wait time) of the waits sorted by (held stream, wait time), to find those
    into a stream within a time range."""
    into = stream_lane[dst]  # the stream each wait holds
    order = np.lexsort((wait_ts, into))
    return order, into[order], wait_ts[order]


def waits_recorded_over(
    src: np.ndarray,
    dst: np.ndarray,
    rec_ts: np.ndarray,
    wait_ts: np.ndarray,
    stream_lane: np.ndarray,
    launch_ts: np.ndarray,
    act_start: np.ndarray,
    act_end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (src, dst, lag) :func:`with_waits_recorded_over` adds, compiled
    (:func:`lumos_core.graph.kernels.waits_recorded_over`)."""
    order, key_lane, key_ts = _waits_by_stream(dst, wait_ts, stream_lane)
    i64 = np.int64

    def arr(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, i64)

    return kernels.waits_recorded_over(  # type: ignore[no-any-return]
        arr(src), arr(dst), arr(rec_ts), arr(key_lane), arr(key_ts), arr(order), arr(stream_lane),
        arr(launch_ts), arr(act_start), arr(act_end), QUEUED_GAP_NS, ROUNDS,
    )  # fmt: skip


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
    order, key_lane, key_ts = _waits_by_stream(dst, wait_ts, stream_lane)
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


def event_wait_pairs(
    t: RankTrace, rn: RankNodes, waits: np.ndarray, launches: Launches, typical_latency: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(source, waiting, lags, record times, wait times, waits inferred), sources and waiting as
    launch indices: the compiled pairing (:func:`lumos_core.graph.kernels.event_wait_pairs`)."""
    launch_nodes, launch_ts, launch_lane, stream_lane = launches
    node_ev = rn.events[launch_nodes - rn.base]
    act_start = t.start[node_ev]
    act_end = act_start + t.dur[node_ev]
    record_mask = t.names_matching(EVENT_RECORD_CALLS.__contains__)
    wait_mask = t.names_matching(STREAM_WAIT_CALLS.__contains__)
    m = len(waits)
    has_exact = np.zeros(m, bool)
    exact_dest = np.full(m, -1, np.int32)
    exact_src = np.full(m, -1, np.int32)
    exact_rec_ts = np.zeros(m, np.int64)
    exact_has_rec = np.zeros(m, bool)
    exact = stream_waits(t)
    row = exact.find(t.correlation[waits])
    sel = np.flatnonzero(row >= 0)
    if len(sel):
        row = row[sel]
        has_exact[sel] = True
        exact_dest[sel] = exact.dest[row]
        exact_src[sel] = exact.src[row]
        # the record call of each wait by correlation (the last one where a correlation repeats)
        rec_ev = np.flatnonzero(record_mask[t.name] & (t.kind == Kind.RUNTIME))
        rec_corr, rec_last = last_by_key(t.correlation[rec_ev])
        at = find_sorted(rec_corr, exact.record_corr[row])
        rec = np.where(at >= 0, rec_ev[rec_last[np.maximum(at, 0)]] if len(rec_ev) else -1, -1)
        starts = np.asarray(t.start)
        ok = rec >= 0
        ok[ok] = starts[rec[ok]] <= starts[waits[sel[ok]]]  # never a record issued after the wait
        exact_has_rec[sel] = ok
        exact_rec_ts[sel[ok]] = starts[rec[ok]]
    if has_exact.all():  # only the waits inferred from the launch order read these
        launch_end = prev_end = np.zeros(len(node_ev), np.int64)
    else:
        launch_of = t.launch[node_ev]
        launch_end = t.start[launch_of] + t.dur[launch_of]
        prev_end = previous_end_on_stream(t, node_ev)
    i64, i32, b = np.int64, np.int32, np.bool_

    def arr(a: np.ndarray, dtype: type) -> np.ndarray:
        # read-only, all of them: some are the cache's read-only columns, so one compiled version
        return jit.read_only(np.ascontiguousarray(a, dtype))

    return kernels.event_wait_pairs(
        arr(waits, i64), arr(t.lane_begin[t.lane[waits]], i64), arr(has_exact, b), arr(exact_dest, i32),
        arr(exact_src, i32), arr(exact_rec_ts, i64), arr(exact_has_rec, b), arr(launch_ts, i64),
        arr(launch_lane, i32), arr(stream_lane, i32),
        arr(act_start, i64), arr(act_end, i64), arr(launch_end, i64),
        arr(prev_end, i64), arr(t.start, i64), arr(t.dur, i64),
        arr(t.kind, np.int8), arr(t.lane, i32), arr(t.external_id, i64), arr(record_mask[t.name], b),
        arr(wait_mask[t.name], b), int(Kind.RUNTIME), int(typical_latency), QUEUED_GAP_NS,
    )  # fmt: skip


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
