"""Compiled per-node loops of graph building: Kahn's topological order, sorting edges by node, the pairing of
cudaStreamWaitEvent calls with the work they wait for, and the calibration of start lags.

Plain loops over flat arrays so numba compiles them (see :mod:`lumos_core.jit`); without numba they
run as Python. ``order.kahn_reference``, ``edges.event_wait`` and ``calibrate`` keep the Python versions the tests
compare these against.
"""

from __future__ import annotations

import numpy as np

from lumos_core.jit import kernel


@kernel
def _less(ka, va, kb, vb):  # type: ignore[no-untyped-def]
    return ka < kb or (ka == kb and va < vb)


@kernel
def _heap_push(heap_k, heap_v, size, k, v):  # type: ignore[no-untyped-def]
    """Put (k, v) into the binary heap of ``size`` entries (sift up); returns the new size."""
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if _less(k, v, heap_k[p], heap_v[p]):
            heap_k[i] = heap_k[p]
            heap_v[i] = heap_v[p]
            i = p
        else:
            break
    heap_k[i] = k
    heap_v[i] = v
    return size + 1


@kernel
def kahn_order(ptr, succ, indeg, key):  # type: ignore[no-untyped-def]
    """Kahn's algorithm taking the ready node of smallest (key, id) first: the order ``heapq`` gives.

    Returns (order, remaining in-degree per node); the order is short of n nodes when there is a
    cycle."""
    n = len(indeg)
    deg = indeg.copy()
    heap_k = np.empty(n, np.int64)
    heap_v = np.empty(n, np.int64)
    size = 0
    out = np.empty(n, np.int32)
    count = 0
    for v0 in range(n):
        if deg[v0] != 0:
            continue
        size = _heap_push(heap_k, heap_v, size, key[v0], v0)
    while size > 0:
        v = heap_v[0]
        out[count] = v
        count += 1
        # pop: move the last entry to the root and sift it down
        size -= 1
        if size > 0:
            lk = heap_k[size]
            lv = heap_v[size]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= size:
                    break
                if c + 1 < size and _less(heap_k[c + 1], heap_v[c + 1], heap_k[c], heap_v[c]):
                    c += 1
                if _less(heap_k[c], heap_v[c], lk, lv):
                    heap_k[i] = heap_k[c]
                    heap_v[i] = heap_v[c]
                    i = c
                else:
                    break
            heap_k[i] = lk
            heap_v[i] = lv
        for j in range(ptr[v], ptr[v + 1]):
            w = succ[j]
            deg[w] -= 1
            if deg[w] == 0:
                size = _heap_push(heap_k, heap_v, size, key[w], w)
    return out[:count].copy(), deg


@kernel
def adjacent_record(wait, lane_lo, start, dur, kind, external_id, is_record, is_wait, runtime_kind):  # type: ignore[no-untyped-def]
    """The cudaEventRecord issued together with ``wait`` (same operator, or just before it), or -1."""
    i = wait - 1
    ext = external_id[wait]
    while i >= lane_lo and start[wait] - start[i] < 200_000:
        if kind[i] == runtime_kind:
            if is_record[i]:
                same_op = ext >= 0 and external_id[i] == ext
                close = start[wait] - (start[i] + dur[i]) < 20_000
                return i if (same_op or close) else -1
            if is_wait[i]:
                return -1  # another wait in between: that record belonged to it
        i -= 1
    return -1


@kernel
def event_wait_pairs(  # type: ignore[no-untyped-def]
    waits,
    wait_lane_lo,
    has_exact,
    exact_dest,
    exact_src,
    exact_rec_ts,
    exact_has_rec,
    launch_ts,
    launch_lane,
    stream_lane,
    act_start,
    act_end,
    launch_end,
    prev_end_on_stream,
    start,
    dur,
    kind,
    lane,
    external_id,
    is_record,
    is_wait,
    runtime_kind,
    typical_latency,
    queued_gap,
):
    """For each wait: (source launch index, destination launch index, lag) — the loop documented in
    ``edges.event_wait.add_event_waits``. Returns (src, dst, lag, record time, wait time, waits
    inferred) per pair found; the record time is the wait's when its record is not visible."""
    m = len(waits)
    n = len(launch_ts)
    srcs = np.empty(m, np.int64)
    dsts = np.empty(m, np.int64)
    lags = np.empty(m, np.int64)
    recs = np.empty(m, np.int64)
    wts = np.empty(m, np.int64)
    found = 0
    inferred = 0
    for i in range(m):
        w = waits[i]
        ts = start[w]
        after = np.searchsorted(launch_ts, ts, side="right")
        src_idx = -1
        dst_idx = -1
        rec_ts = ts
        if has_exact[i]:
            dest_lane = exact_dest[i]
            src_lane = exact_src[i]
            if src_lane < 0:  # it waits on a stream that ran nothing in the trace
                continue
            cut = after
            if exact_has_rec[i]:
                cut = np.searchsorted(launch_ts, exact_rec_ts[i], side="right")
                rec_ts = exact_rec_ts[i]
            for k in range(cut - 1, -1, -1):
                if stream_lane[k] == src_lane:
                    src_idx = k
                    break
            for k in range(after, n):
                if stream_lane[k] == dest_lane:
                    dst_idx = k
                    break
            if dst_idx < 0:
                continue
        else:
            inferred += 1
            for k in range(after, n):
                if launch_lane[k] == lane[w]:
                    dst_idx = k
                    break
            if dst_idx < 0:
                continue
            dest_lane = stream_lane[dst_idx]
            rec = adjacent_record(
                w, wait_lane_lo[i], start, dur, kind, external_id, is_record, is_wait, runtime_kind
            )
            if rec >= 0:
                cut = np.searchsorted(launch_ts, start[rec], side="right")
                rec_ts = start[rec]
                # the last launch before the record on another stream is that stream's last work
                for k in range(cut - 1, -1, -1):
                    if stream_lane[k] != dest_lane:
                        src_idx = k
                        break
            explained = max(prev_end_on_stream[dst_idx], launch_end[dst_idx] + typical_latency)
            if act_start[dst_idx] - explained > queued_gap:
                # it waited for something: the other-stream work that ended last just before it
                limit = act_start[dst_idx] + 2_000
                best = -1
                for k in range(after):
                    ok = stream_lane[k] != dest_lane and act_end[k] <= limit
                    if ok and (best < 0 or act_end[k] > act_end[best]):
                        best = k
                if best >= 0 and (src_idx < 0 or act_end[best] > act_end[src_idx]):
                    src_idx = best
        if src_idx < 0 or stream_lane[src_idx] == stream_lane[dst_idx]:
            continue
        srcs[found] = src_idx
        dsts[found] = dst_idx
        lags[found] = min(max(act_start[dst_idx] - act_end[src_idx], 0), queued_gap)
        recs[found] = rec_ts
        wts[found] = ts
        found += 1
    return (
        srcs[:found].copy(),
        dsts[:found].copy(),
        lags[:found].copy(),
        recs[:found].copy(),
        wts[:found].copy(),
        inferred,
    )


@kernel
def calibrate_start(src, dst, lag, from_end, ms, me, anchor, no_anchor, absorb):  # type: ignore[no-untyped-def]
    """:func:`lumos_core.graph.calibrate.calibrate_start_lags` in three passes over the edges,
    without its edge-sized temporaries. Returns (calibrated lags, unexplained delay per node)."""
    m = len(src)
    n = len(ms)
    lowest = np.iinfo(np.int64).min
    out = np.empty(m, np.int64)
    best = np.full(n, lowest, np.int64)
    for i in range(m):
        s = src[i]
        d = dst[i]
        t = me[s] if from_end[i] else ms[s]
        lg = lag[i]
        b = t + lg
        if b > ms[d]:  # too tight: the task started earlier than this edge allows
            lg = lg - (b - ms[d])
            b = t + lg
        out[i] = lg
        if b > best[d]:
            best[d] = b
    delay = np.zeros(n, np.int64)
    for v in range(n):
        if best[v] > lowest // 2 and anchor[v] == no_anchor:
            x = ms[v] - best[v]
            if x > 0:
                delay[v] = x
    if absorb:  # the delay goes to the first edge (in edge order) that binds its task
        taken = np.zeros(n, np.bool_)
        for i in range(m):
            d = dst[i]
            if taken[d]:
                continue
            s = src[i]
            t = me[s] if from_end[i] else ms[s]
            if t + out[i] == best[d]:
                taken[d] = True
                out[i] += delay[d]
    return out, delay


@kernel
def stable_bucket_order(keys, n):  # type: ignore[no-untyped-def]
    """``np.argsort(keys, kind="stable")`` for integer keys in [0, n): a counting sort, linear in
    the edges (laying edges out by source or destination is the graph's most common sort)."""
    m = len(keys)
    slot = np.zeros(n + 1, np.int64)
    for i in range(m):
        slot[keys[i] + 1] += 1
    for v in range(n):
        slot[v + 1] += slot[v]
    out = np.empty(m, np.int64)
    for i in range(m):
        k = keys[i]
        out[slot[k]] = i
        slot[k] += 1
    return out


def warm_up() -> None:
    """Compile the kernels on tiny inputs."""
    ptr = np.asarray([0, 1, 1], np.int64)
    for dtype in (np.int32, np.int64):  # the graph's own ids are int32; rewrites pass int64
        kahn_order(ptr, np.asarray([1], dtype), np.asarray([0, 1], np.int64), np.zeros(2, np.int64))
    i64 = np.zeros(1, np.int64)
    i32 = np.zeros(1, np.int32)
    b = np.zeros(1, bool)
    event_wait_pairs(
        i64, i64, b, i32, i32, i64, b, i64, i32, i32, i64, i64, i64, i64,
        i64, i64, np.zeros(1, np.int8), i32, i64, b, b, 5, 2_000, 5_000,
    )  # fmt: skip
    calibrate_start(i32, i32, i64, b, i64, i64, i64, 0, False)
    for keys in (i32, i64):
        stable_bucket_order(keys, 1)
