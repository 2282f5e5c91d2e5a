"""Compiled per-node loops of graph building: the topological order, sorting edges by node, the pairing of
cudaStreamWaitEvent calls with the work they wait for, and the calibration of start lags.

Plain loops over flat arrays so numba compiles them (see :mod:`lumos_core.jit`); without numba they
run as Python. The tests compare them with independent numpy and ``heapq`` versions
(tests/kernel_references.py).
"""

from __future__ import annotations

import numpy as np

from lumos_core.jit import kernel, read_only


@kernel
def successor_lists(sp_ptr, sp_src, ep_ptr, ep_src):  # type: ignore[no-untyped-def]
    """Both dependency lists (CSR by destination) as one list of successors per node (CSR by
    source), with each node's in-degree. Successors come in no particular order: Kahn's algorithm
    with a total priority order does not depend on it."""
    n = len(sp_ptr) - 1
    ptr = np.zeros(n + 1, np.int64)
    deg = np.empty(n, np.int32)
    for j in range(len(sp_src)):
        ptr[sp_src[j] + 1] += 1
    for j in range(len(ep_src)):
        ptr[ep_src[j] + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
        deg[v] = (sp_ptr[v + 1] - sp_ptr[v]) + (ep_ptr[v + 1] - ep_ptr[v])
    succ = np.empty(ptr[n], np.int32)
    for v in range(n):  # ptr[u] is u's write cursor: it ends at u's end, ptr[u + 1]'s start...
        for j in range(sp_ptr[v], sp_ptr[v + 1]):
            u = sp_src[j]
            succ[ptr[u]] = v
            ptr[u] += 1
        for j in range(ep_ptr[v], ep_ptr[v + 1]):
            u = ep_src[j]
            succ[ptr[u]] = v
            ptr[u] += 1
    for v in range(n, 0, -1):  # ...so shifting by one restores every start
        ptr[v] = ptr[v - 1]
    ptr[0] = 0
    return ptr, succ, deg


@kernel
def _heap_push(heap, size, r):  # type: ignore[no-untyped-def]
    """Put rank ``r`` into the binary min-heap of ``size`` entries (grown when full); returns the
    heap (possibly a new array) and its new size."""
    if size == len(heap):
        grown = np.empty(2 * len(heap), heap.dtype)
        grown[:size] = heap[:size]
        heap = grown
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if r < heap[p]:
            heap[i] = heap[p]
            i = p
        else:
            break
    heap[i] = r
    return heap, size + 1


@kernel
def _heap_pop(heap, size):  # type: ignore[no-untyped-def]
    """Remove the smallest entry (the root) of the heap of ``size`` entries; returns it."""
    top = heap[0]
    size -= 1
    if size > 0:
        last = heap[size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and heap[c + 1] < heap[c]:
                c += 1
            if heap[c] < last:
                heap[i] = heap[c]
                i = c
            else:
                break
        heap[i] = last
    return top


@kernel
def kahn_ranked(by_rank, ptr, succ, deg):  # type: ignore[no-untyped-def]
    """Kahn's algorithm taking the ready node that comes first in ``by_rank`` (the nodes sorted by
    priority): the order ``heapq`` gives with that priority. ``deg`` (in-degrees) is used up.

    The nodes are visited in priority order; the next one is taken when it is ready. Only a node
    passed over while it was not ready waits in a heap (of ranks) until its last dependency is
    taken. When the priority order is already topological the heap stays empty and the pass is
    linear. Returns (order, remaining in-degree per node); the order is short of n nodes when there
    is a cycle."""
    n = len(by_rank)
    rank = np.empty(n, np.int32)
    for r in range(n):
        rank[by_rank[r]] = r
    heap = np.empty(1024, np.int32)
    size = 0
    out = np.empty(n, np.int32)
    count = 0
    i = 0  # every node of rank < i was taken or passed over
    while True:
        while i < n and deg[by_rank[i]] != 0:
            i += 1
        if size > 0 and (i >= n or heap[0] < i):
            r = _heap_pop(heap, size)
            size -= 1
        elif i < n:
            r = i
            i += 1
        else:
            break
        v = by_rank[r]
        out[count] = v
        count += 1
        for j in range(ptr[v], ptr[v + 1]):
            w = succ[j]
            deg[w] -= 1
            if deg[w] == 0 and rank[w] < i:  # passed over already: it waits in the heap
                heap, size = _heap_push(heap, size, rank[w])
    return out[:count].copy(), deg


@kernel
def _respects(rank, sp_ptr, sp_src, ep_ptr, ep_src):  # type: ignore[no-untyped-def]
    """Whether every dependency's source has a lower ``rank`` than its destination."""
    for v in range(len(sp_ptr) - 1):
        rv = rank[v]
        for j in range(sp_ptr[v], sp_ptr[v + 1]):
            if rank[sp_src[j]] >= rv:
                return False
        for j in range(ep_ptr[v], ep_ptr[v + 1]):
            if rank[ep_src[j]] >= rv:
                return False
    return True


@kernel
def sort_by_key(key):  # type: ignore[no-untyped-def]
    """The nodes in (key, id) order - ``np.argsort(key, kind="stable")`` as int32 - and the keys in
    that order, by a least-significant-digit radix sort (11-bit digits, passes where every key has
    the same digit skipped). ``key`` (int64) is used up as one of the two key buffers."""
    n = len(key)
    if n == 0:
        return np.zeros(0, np.int32), key
    k = key.view(np.uint64)
    sign = np.uint64(1) << np.uint64(63)
    lo = k[0] ^ sign
    hi = lo
    for i in range(n):  # flipping the sign bit orders int64 keys as unsigned ones
        k[i] ^= sign
        lo = min(lo, k[i])
        hi = max(hi, k[i])
    top = lo ^ hi  # the digits above its highest bit are the same in every key
    k2 = np.empty(n, np.uint64)
    idx = np.arange(n).astype(np.int32)
    idx2 = np.empty(n, np.int32)
    count = np.empty(2048, np.int64)
    shift = np.uint64(0)
    while shift < 64 and (top >> shift) > 0:
        count[:] = 0
        for i in range(n):
            count[(k[i] >> shift) & np.uint64(2047)] += 1
        if count.max() < n:  # otherwise every key has this digit: the pass would change nothing
            total = 0
            for d in range(2048):
                c = count[d]
                count[d] = total
                total += c
            for i in range(n):
                d = (k[i] >> shift) & np.uint64(2047)
                p = count[d]
                k2[p] = k[i]
                idx2[p] = idx[i]
                count[d] = p + 1
            k, k2 = k2, k
            idx, idx2 = idx2, idx
        shift += np.uint64(11)
    for i in range(n):
        k[i] ^= sign
    return idx, k.view(np.int64)


@kernel
def measured_order(by_key, sorted_key, is_join, sp_ptr, sp_src, ep_ptr, ep_src):  # type: ignore[no-untyped-def]
    """``order.topological_order`` given ``by_key``, the nodes sorted by (key, id), and their keys
    in that order (:func:`sort_by_key`).

    1. (key, joins last, id) - ``by_key`` with each collective join moved after the other nodes
       of its key - when that is a topological order;
    2. else Kahn's algorithm preferring (key, id) (:func:`kahn_ranked`), which is ``by_key`` itself
       when that is topological (checked first: one pass over the edges).
    Returns (order, remaining in-degree per node) like :func:`kahn_ranked`."""
    n = len(by_key)
    lex = np.empty(n, np.int32)
    moved = False
    a = 0
    while a < n:
        k = sorted_key[a]
        b = a + 1
        while b < n and sorted_key[b] == k:
            b += 1
        w = a
        for q in range(a, b):
            if not is_join[by_key[q]]:
                lex[w] = by_key[q]
                w += 1
        for q in range(a, b):
            if is_join[by_key[q]]:
                lex[w] = by_key[q]
                moved = moved or w != q
                w += 1
        a = b
    rank = np.empty(n, np.int32)
    for r in range(n):
        rank[lex[r]] = r
    if _respects(rank, sp_ptr, sp_src, ep_ptr, ep_src):
        return lex, np.zeros(n, np.int32)
    if moved:
        for r in range(n):
            rank[by_key[r]] = r
        if _respects(rank, sp_ptr, sp_src, ep_ptr, ep_src):
            return by_key.copy(), np.zeros(n, np.int32)
    ptr, succ, deg = successor_lists(sp_ptr, sp_src, ep_ptr, ep_src)
    return kahn_ranked(by_key, ptr, succ, deg)


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


@kernel
def csr_edges(n, dst, src, lag, from_end, kind):  # type: ignore[no-untyped-def]
    """``order.csr``: the edges laid out by destination in one counting-sort pass that moves every
    column at once (no permutation array, no gather per column). Stable: a destination's edges keep
    their given order."""
    m = len(dst)
    ptr = np.zeros(n + 1, np.int64)
    for i in range(m):
        ptr[dst[i] + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    o_src = np.empty(m, np.int32)
    o_lag = np.empty(m, np.int64)
    o_end = np.empty(m, np.bool_)
    o_kind = np.empty(m, np.int8)
    for i in range(m):  # ptr[d] is d's write cursor: it ends at ptr[d + 1]'s start...
        d = dst[i]
        p = ptr[d]
        o_src[p] = src[i]
        o_lag[p] = lag[i]
        o_end[p] = from_end[i]
        o_kind[p] = kind[i]
        ptr[d] = p + 1
    for v in range(n, 0, -1):  # ...so shifting by one restores every start
        ptr[v] = ptr[v - 1]
    ptr[0] = 0
    return ptr, (o_src, o_lag, o_end, o_kind)


@kernel
def _grown(a, n):  # type: ignore[no-untyped-def]
    """``a`` with room for at least ``n`` entries (its first entries kept)."""
    if n <= len(a):
        return a
    out = np.empty(max(2 * len(a), n), a.dtype)
    out[: len(a)] = a
    return out


@kernel
def waits_recorded_over(  # type: ignore[no-untyped-def]
    src, dst, cap, key_lane, key_ts, order, stream_lane, launch_ts, act_start, act_end, queued_gap, rounds
):
    """The pairs an event captures besides its stream's last kernel, found ``rounds`` times over
    (chains of waits): tests/kernel_references.py has its numpy form, the reference. All arguments are launch-indexed int64 arrays; ``key_lane``/``key_ts`` are the
    waits' held stream and time sorted by (stream, time), ``order`` the pair of each key. Returns
    the added (src, dst, lag), in the order the numpy form appends them."""
    width = len(launch_ts)
    seen = {np.int64(-1)}  # typed by its first key (no pair key is negative)
    for i in range(len(src)):
        seen.add(src[i] * width + dst[i])
    out_src = np.empty(16, np.int64)
    out_dst = np.empty(16, np.int64)
    out_lag = np.empty(16, np.int64)
    n_out = 0
    new_src = src.copy()
    new_dst = dst.copy()
    new_cap = cap.copy()
    for _ in range(rounds):
        m = len(new_src)
        lo = np.empty(m, np.int64)
        hi = np.empty(m, np.int64)
        total = 0
        for p in range(m):
            lane_a = stream_lane[new_src[p]]
            a = np.searchsorted(key_lane, lane_a, side="left")
            b = np.searchsorted(key_lane, lane_a, side="right")
            lo[p] = a + np.searchsorted(key_ts[a:b], launch_ts[new_src[p]], side="right")
            hi[p] = a + np.searchsorted(key_ts[a:b], new_cap[p], side="left")
            if hi[p] > lo[p]:
                total += hi[p] - lo[p]
        if total == 0:
            break
        cand_key = np.empty(total, np.int64)
        cand_cap = np.empty(total, np.int64)
        c = 0
        for p in range(m):
            d = new_dst[p]
            for j in range(lo[p], hi[p]):
                s = src[order[j]]
                k = s * width + d
                if stream_lane[s] != stream_lane[d] and k not in seen:
                    cand_key[c] = k
                    cand_cap[c] = new_cap[p]
                    c += 1
        if c == 0:
            break
        perm = np.argsort(cand_key[:c], kind="mergesort")  # stable: the first of equal pairs leads
        new_src = np.empty(c, np.int64)
        new_dst = np.empty(c, np.int64)
        next_cap = np.empty(c, np.int64)
        u = 0
        last = -1  # keys are >= 0
        for q in range(c):
            k = cand_key[perm[q]]
            if k != last:
                last = k
                new_src[u] = k // width
                new_dst[u] = k % width
                next_cap[u] = cand_cap[perm[q]]
                u += 1
        new_src, new_dst, new_cap = new_src[:u], new_dst[:u], next_cap[:u]
        out_src = _grown(out_src, n_out + u)
        out_dst = _grown(out_dst, n_out + u)
        out_lag = _grown(out_lag, n_out + u)
        for q in range(u):
            s = new_src[q]
            d = new_dst[q]
            seen.add(s * width + d)
            out_src[n_out] = s
            out_dst[n_out] = d
            out_lag[n_out] = min(max(act_start[d] - act_end[s], 0), queued_gap)
            n_out += 1
    return out_src[:n_out].copy(), out_dst[:n_out].copy(), out_lag[:n_out].copy()


def warm_up() -> None:
    """Compile the kernels on tiny inputs (called by :mod:`lumos_core.replay.warm_up`)."""
    ptr = np.asarray([0, 0, 1], np.int64)
    src = np.asarray([0], np.int32)
    sort_by_key(np.asarray([3, 1], np.int64))
    measured_order(
        np.asarray([0, 1], np.int32),
        np.zeros(2, np.int64),
        np.zeros(2, bool),
        ptr,
        src,
        ptr[:1].repeat(3),
        src[:0],
    )
    kahn_ranked(np.asarray([0, 1], np.int32), ptr, np.asarray([1], np.int32), np.asarray([0, 1], np.int32))
    successor_lists(ptr, src, ptr, src)
    i64 = np.zeros(1, np.int64)
    i32 = np.zeros(1, np.int32)
    b = np.zeros(1, bool)
    r64, r32, rb, r8 = (read_only(a) for a in (i64, i32, b, np.zeros(1, np.int8)))
    event_wait_pairs(  # its inputs come read-only (see edges/event_wait.py)
        r64, r64, rb, r32, r32, r64, rb, r64, r32, r32, r64, r64, r64, r64,
        r64, r64, r8, r32, r64, rb, rb, 5, 2_000, 5_000,
    )  # fmt: skip
    calibrate_start(i32, i32, i64, b, i64, i64, i64, 0, False)
    i8 = np.zeros(1, np.int8)
    for ids in (i32, i64):  # the graph's own ids are int32; rewrites pass int64
        csr_edges(1, ids, ids, i64, b, i8)
    for keys in (i32, i64):
        stable_bucket_order(keys, 1)
    waits_recorded_over(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, 5_000, 4)
