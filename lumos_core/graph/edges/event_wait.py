"""``EVENT_WAIT``: cudaEventRecord on one stream -> cudaStreamWaitEvent on another."""

from __future__ import annotations

import numpy as np

from lumos_core import jit
from lumos_core.graph import kernels
from lumos_core.graph.edges.cuda_sync import find_sorted, last_by_key, stream_waits
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
    src, dst, lag, rec_ts, wait_ts, inferred = event_wait_pairs(t, rn, waits, launches, typical_latency)
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
    more = waits_recorded_over(src, dst, rec_ts, wait_ts, stream_lane, launch_ts, act_start, act_end)
    return np.concatenate([src, more[0]]), np.concatenate([dst, more[1]]), np.concatenate([lag, more[2]])


def waits_by_stream(dst: np.ndarray, wait_ts: np.ndarray, stream_lane: np.ndarray) -> tuple[np.ndarray, ...]:
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
    order, key_lane, key_ts = waits_by_stream(dst, wait_ts, stream_lane)
    i64 = np.int64

    def arr(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, i64)

    return kernels.waits_recorded_over(  # type: ignore[no-any-return]
        arr(src), arr(dst), arr(rec_ts), arr(key_lane), arr(key_ts), arr(order), arr(stream_lane),
        arr(launch_ts), arr(act_start), arr(act_end), QUEUED_GAP_NS, ROUNDS,
    )  # fmt: skip


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
