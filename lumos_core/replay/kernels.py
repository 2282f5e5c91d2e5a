"""Compiled per-node loops of the replay: the topological simulation pass, the critical-path walk, and
the placing of a replayed timeline's other events between its tasks.

Written as plain loops over flat arrays so numba compiles them (see :mod:`lumos_core.jit`); without
numba they run as Python. The tests compare them with independent list-based and numpy versions
(tests/kernel_references.py).
"""

from __future__ import annotations

import numpy as np

from lumos_core.jit import kernel

# Critical-path categories: slots 0-3 are these, slot CAT_LAG + k is the lag of edge kind k.
CAT_CPU = 0
CAT_COMM = 1
CAT_COMPUTE = 2
CAT_SYNC_WAIT = 3
CAT_LAG = 4
JOIN_TYPE = 3  # NodeType.JOIN (kept numeric: kernels see no enums)


@kernel
def simulate_pass(
    order, anchor, dur, sp_ptr, sp_src, sp_from_end, sp_lag, ep_ptr, ep_src, ep_from_end, ep_lag
):  # type: ignore[no-untyped-def]
    """Start and end of every node, visiting ``order`` (a topological order) once."""
    n = len(dur)
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    for i in range(len(order)):
        v = order[i]
        s = anchor[v]
        for j in range(sp_ptr[v], sp_ptr[v + 1]):
            u = sp_src[j]
            x = (end[u] if sp_from_end[j] else start[u]) + sp_lag[j]
            if x > s:
                s = x
        e = s + dur[v]
        for j in range(ep_ptr[v], ep_ptr[v + 1]):
            u = ep_src[j]
            x = (end[u] if ep_from_end[j] else start[u]) + ep_lag[j]
            if x > e:
                e = x
        start[v] = s
        end[v] = e
    return start, end


@kernel
def critical_walk(  # type: ignore[no-untyped-def]
    v,
    window_start,
    start,
    end,
    anchor,
    dur,
    node_type,
    category,
    sp_ptr,
    sp_src,
    sp_from_end,
    sp_lag,
    sp_kind,
    ep_ptr,
    ep_src,
    ep_from_end,
    ep_lag,
    n_slots,
    max_steps,
):
    """Walk back from ``v`` along the binding dependencies (see ``run.critical_path``).

    Returns (nodes in walk order, ns per category slot, first-seen rank per slot or -1)."""
    nodes = np.empty(1024, np.int64)
    count = 0
    sums = np.zeros(n_slots, np.int64)
    seen = np.full(n_slots, -1, np.int64)
    n_seen = 0
    guard = 0
    while v >= 0 and guard < max_steps:
        guard += 1
        if count == len(nodes):
            grown = np.empty(2 * len(nodes), np.int64)
            for k in range(count):  # a plain loop: slice assignment costs seconds of compile time
                grown[k] = nodes[k]
            nodes = grown
        nodes[count] = v
        count += 1
        # the end dependency that made a blocking call end late (binding_end_predecessor)
        best = start[v] + dur[v]
        u = -1
        for j in range(ep_ptr[v], ep_ptr[v + 1]):
            w = ep_src[j]
            x = (end[w] if ep_from_end[j] else start[w]) + ep_lag[j]
            if x > best:
                best = x
                u = w
        if u >= 0:
            met = max(end[u], start[v])
            if seen[CAT_SYNC_WAIT] < 0:
                seen[CAT_SYNC_WAIT] = n_seen
                n_seen += 1
            sums[CAT_SYNC_WAIT] += end[v] - met
            slot = category[v]
            if seen[slot] < 0:
                seen[slot] = n_seen
                n_seen += 1
            sums[slot] += met - start[v]
            v = u
            continue
        if node_type[v] != JOIN_TYPE:
            slot = category[v]
            if seen[slot] < 0:
                seen[slot] = n_seen
                n_seen += 1
            sums[slot] += end[v] - start[v]
        if start[v] <= window_start:
            break
        # the start dependency that set its start (binding_predecessor: the last of equal bounds)
        best = anchor[v]
        u = -1
        kind = -1
        for j in range(sp_ptr[v], sp_ptr[v + 1]):
            w = sp_src[j]
            x = (end[w] if sp_from_end[j] else start[w]) + sp_lag[j]
            if x >= best:
                best = x
                u = w
                kind = sp_kind[j]
        if u < 0:
            break
        from_end = True  # the first edge from u decides which of its times the lag is measured from
        for j in range(sp_ptr[v], sp_ptr[v + 1]):
            if sp_src[j] == u:
                from_end = sp_from_end[j]
                break
        gap = start[v] - (end[u] if from_end else start[u])
        if gap != 0:
            slot = CAT_LAG + kind
            if seen[slot] < 0:
                seen[slot] = n_seen
                n_seen += 1
            sums[slot] += gap
        v = u
    return nodes[:count].copy(), sums, seen


@kernel
def place_in_gap(x, k, j, has_n, has_p, ms, ns, me_sorted, ne_sorted):  # type: ignore[no-untyped-def]
    """New times of the points ``x`` of a replayed timeline that fall between tasks (an operator's
    start or end around the tasks it contains), given the next task ``k`` to start (valid where
    ``has_n``) and the last task ``j`` ended (valid where ``has_p``): moved with the next task, else
    with the previous one, and interpolated across the gap where both exist and the gap is real
    (measured gap > 0, replayed gap >= 0). ``ms``/``ns``: measured/new task starts; ``me_sorted``/
    ``ne_sorted``: measured/new task ends, by measured end.

    One pass per point. The numpy expression it replaces
    (``place_in_gap_numpy`` in tests/kernel_references.py, the reference the tests compare it with)
    made a dozen temporaries the size of ``x``; this step of the replayed timelines is 18-25 % faster
    so (256 and 512 ranks, measured in-process). The arithmetic is the same, operation for operation
    (float64 fraction, round half to even), so the times are identical."""
    out = np.empty(len(x), np.int64)
    for i in range(len(x)):
        ki = k[i]
        ji = j[i]
        if has_n[i]:
            t = x[i] + (ns[ki] - ms[ki])
        else:
            t = x[i] + (ne_sorted[ji] - me_sorted[ji])
        if has_n[i] and has_p[i]:
            g_old = np.float64(ms[ki] - me_sorted[ji])
            g_new = np.float64(ns[ki] - ne_sorted[ji])
            if g_old > 0 and g_new >= 0:
                frac = np.float64(x[i] - me_sorted[ji]) / g_old
                t = ne_sorted[ji] + np.int64(np.rint(frac * g_new))
        out[i] = t
    return out


def warm_up() -> None:
    """Compile the simulation pass and the critical-path walk on a two-node graph, with int32 CSR
    pointers (a graph's own) and int64 ones (a graph past 2**31 edges, or one laid out outside the
    graph factory), and the gap placement on one point."""
    z = np.zeros(2, np.int64)
    src = np.zeros(1, np.int32)
    fe = np.ones(1, bool)
    lag = np.zeros(1, np.int64)
    kind = np.zeros(1, np.int8)
    e_src = np.zeros(0, np.int32)
    order = np.arange(2, dtype=np.int32)
    dur = np.ones(2, np.int64)
    for index in (np.int32, np.int64):
        ptr = np.asarray([0, 0, 1], index)
        e_ptr = np.zeros(3, index)
        s, e = simulate_pass(order, z, dur, ptr, src, fe, lag, e_ptr, e_src, fe[:0], lag[:0])
        critical_walk(
            1, 0, s, e, z, dur, np.zeros(2, np.int8), np.zeros(2, np.int8),
            ptr, src, fe, lag, kind, e_ptr, e_src, fe[:0], lag[:0], 13, 1_000_000,
        )  # fmt: skip
    i = np.zeros(1, np.int64)
    place_in_gap(i, i, i, fe, fe, i, i, i, i)
