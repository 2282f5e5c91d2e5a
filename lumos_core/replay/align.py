"""Align two sequences of keys per processor in O(n log n): which element of one sequence plays
the part of which element of the other (the twins of :mod:`lumos_core.replay.twins`).

A patience-style diff, vectorised over all processors at once. Both sequences are cut into
segments (initially one per processor). Each round pairs the keys that occur exactly once in the
same segment of both sequences, keeps the largest set of such pairs that do not cross (a longest
increasing subsequence), and splits the segments at them, so that names repeated per layer become
unique between two anchors. When no unique key is left, keys that occur equally often in a segment
of both sequences are paired by occurrence (the i-th with the i-th), and at last every key's
occurrences are paired from the front. Never a quadratic diff: each round is a few sorts.
"""

from __future__ import annotations

import bisect

import numpy as np

_ROUNDS = 32  # rounds of anchoring at most (each one at least splits the segments further)
# Two anchoring strategies, each a list of rounds tried in order (back to the first after any
# find): names unique in both first (right where programs differ by blocks of work), or expected
# place first (right where a few data-dependent tasks are scattered). Per processor, the one that
# pairs more tasks wins.
STRATEGIES = (
    ("extend", "unique", "equal", "nearest", "front"),
    ("extend", "nearest", "unique", "equal", "front"),
)


def align(
    proc_a: np.ndarray, key_a: np.ndarray, proc_b: np.ndarray, key_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Matched index pairs (ia, ib), increasing, of two sequences sorted by processor (order within
    a processor is the sequence order). Only equal keys of the same processor are paired."""
    proc_a, proc_b = np.asarray(proc_a, np.int64), np.asarray(proc_b, np.int64)
    key_a, key_b = np.asarray(key_a, np.int64), np.asarray(key_b, np.int64)
    na, nb = len(key_a), len(key_b)
    if na == nb and np.array_equal(proc_a, proc_b) and np.array_equal(key_a, key_b):
        idx = np.arange(na)
        return idx, idx
    # Processors whose two sequences are identical pair position by position; the rounds run on
    # the others only.
    same_a, same_b, ident_a, ident_b = _identical(proc_a, key_a, proc_b, key_b)
    if len(same_a):
        ra, rb = np.flatnonzero(~ident_a), np.flatnonzero(~ident_b)
        ia, ib = _align_rounds(proc_a[ra], key_a[ra], proc_b[rb], key_b[rb])
        ia, ib = np.r_[same_a, ra[ia]], np.r_[same_b, rb[ib]]
        o = np.argsort(ia, kind="stable")
        return ia[o], ib[o]
    return _align_rounds(proc_a, key_a, proc_b, key_b)


def _identical(pa, ka, pb, kb):  # type: ignore[no-untyped-def]
    """(pairs in a, pairs in b, element masks of a and b) of the processors whose sequences are
    identical in both."""
    top = max(int(pa.max(initial=0)), int(pb.max(initial=0))) + 1
    ca, cb = np.bincount(pa, minlength=top), np.bincount(pb, minlength=top)
    sa, sb = np.r_[0, np.cumsum(ca)[:-1]], np.r_[0, np.cumsum(cb)[:-1]]
    i = np.flatnonzero((ca == cb)[pa])
    p = pa[i]
    j = sb[p] + (i - sa[p])
    bad = np.zeros(top, bool)
    bad[p[ka[i] != kb[j]]] = True
    ident = (ca == cb) & ~bad & (ca > 0)
    keep = ident[p]
    return i[keep], j[keep], ident[pa], ident[pb]


def _align_rounds(proc_a, key_a, proc_b, key_b):  # type: ignore[no-untyped-def]
    """:func:`align` by rounds of anchoring (see the module docstring), both strategies."""
    na = len(key_a)
    if na == 0 or len(key_b) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    best = None
    for modes in STRATEGIES:
        twin_a = np.full(na, -1, np.int64)
        _round(proc_a, key_a, proc_b, key_b, twin_a, "extend")  # common prefixes and suffixes
        mode = 1
        for _ in range(_ROUNDS + len(modes)):
            if mode >= len(modes):
                break
            if _round(proc_a, key_a, proc_b, key_b, twin_a, modes[mode]):
                # new anchors: extend their runs, then look again from the first kind between them
                _round(proc_a, key_a, proc_b, key_b, twin_a, "extend")
                mode = 1
            else:
                mode += 1
        if best is None:
            best = twin_a
            continue
        # per processor, keep the strategy that paired more tasks
        top = int(proc_a.max(initial=0)) + 1
        got_best = np.bincount(proc_a[best >= 0], minlength=top)
        got_new = np.bincount(proc_a[twin_a >= 0], minlength=top)
        better = got_new > got_best
        best = np.where(better[proc_a], twin_a, best)
    assert best is not None
    ia = np.flatnonzero(best >= 0)
    return ia, best[ia]


def _round(pa, ka, pb, kb, twin_a, mode: str) -> bool:  # type: ignore[no-untyped-def]
    """One round: candidate pairs of unmatched elements, keep the non-crossing ones. True when any
    pair was added."""
    matched_b = np.zeros(len(kb), bool)
    matched_b[twin_a[twin_a >= 0]] = True
    matched_a = twin_a >= 0
    top = max(int(pa.max(initial=0)), int(pb.max(initial=0)))
    seg_a = _segments_common(pa, matched_a, top)
    seg_b = _segments_common(pb, matched_b, top)
    ua, ub = np.flatnonzero(~matched_a), np.flatnonzero(~matched_b)
    if len(ua) == 0 or len(ub) == 0:
        return False
    if mode == "extend":
        return _extend(seg_a[ua], ka[ua], ua, seg_b[ub], kb[ub], ub, twin_a)
    # One group id per (segment, key), shared by both sequences.
    seg = np.r_[seg_a[ua], seg_b[ub]]
    key = np.r_[ka[ua], kb[ub]]
    side = np.r_[np.zeros(len(ua), np.int8), np.ones(len(ub), np.int8)]
    pos = np.r_[ua, ub]
    order = np.lexsort((pos, side, key, seg))
    s, k, sd, p = seg[order], key[order], side[order], pos[order]
    new = np.r_[True, (s[1:] != s[:-1]) | (k[1:] != k[:-1])]
    gid = np.cumsum(new) - 1
    ng = int(gid[-1]) + 1
    cnt_a = np.bincount(gid[sd == 0], minlength=ng)
    cnt_b = np.bincount(gid[sd == 1], minlength=ng)
    first = np.flatnonzero(new)
    # occurrence number within the group and side (rows are sorted by side, then position)
    first_b = first + cnt_a  # where the b rows of each group start
    occ = np.arange(len(p)) - np.where(sd == 0, first[gid], first_b[gid])
    if mode == "nearest":
        cand_a, cand_b = _nearest(s, sd, p, gid, len(kb))
    else:
        cand_a, cand_b = _by_occurrence(mode, sd, p, gid, cnt_a, cnt_b, first_b, occ)
    if len(cand_a) == 0:
        return False
    o = np.argsort(cand_a, kind="stable")
    cand_a, cand_b = cand_a[o], cand_b[o]
    keep = increasing_subsequence(cand_b)
    twin_a[cand_a[keep]] = cand_b[keep]
    return bool(len(keep))


def _by_occurrence(mode, sd, p, gid, cnt_a, cnt_b, first_b, occ):  # type: ignore[no-untyped-def]
    """Pairs of a (segment, key) group by occurrence: only where the key is unique in both
    (``unique``), where it occurs equally often (``equal``), or from the front (``front``)."""
    if mode == "unique":
        ok = (cnt_a == 1) & (cnt_b == 1)
    elif mode == "equal":
        ok = (cnt_a == cnt_b) & (cnt_a > 0)
    else:
        ok = (cnt_a > 0) & (cnt_b > 0)
    take = np.minimum(cnt_a, cnt_b)
    rows_a = np.flatnonzero((sd == 0) & ok[gid] & (occ < take[gid]))
    return p[rows_a], p[first_b[gid[rows_a]] + occ[rows_a]]


def _nearest(seg, sd, p, gid, nb):  # type: ignore[no-untyped-def]
    """Pairs each unmatched element of a with the unmatched element of the same key and segment of
    b nearest to where it is expected: at the same relative place between the segment's anchors.
    Each element of b keeps the closest of the elements that chose it."""
    a_rows, b_rows = np.flatnonzero(sd == 0), np.flatnonzero(sd == 1)
    if len(a_rows) == 0 or len(b_rows) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # each segment's range in both sequences (a segment's elements are all unmatched)
    sa, pa = seg[a_rows], p[a_rows]
    sb, pb = seg[b_rows], p[b_rows]
    useg = np.unique(sa)
    lo_a = np.full(len(useg), np.iinfo(np.int64).max)
    hi_a = np.full(len(useg), -1)
    ia = np.searchsorted(useg, sa)
    np.minimum.at(lo_a, ia, pa)
    np.maximum.at(hi_a, ia, pa)
    ib = np.searchsorted(useg, sb)
    inb = (ib < len(useg)) & (useg[np.minimum(ib, len(useg) - 1)] == sb)
    lo_b = np.full(len(useg), np.iinfo(np.int64).max)
    hi_b = np.full(len(useg), -1)
    np.minimum.at(lo_b, ib[inb], pb[inb])
    np.maximum.at(hi_b, ib[inb], pb[inb])
    has_b = hi_b[ia] >= 0
    span_a = (hi_a - lo_a + 1)[ia]
    span_b = np.maximum(hi_b - lo_b + 1, 0)[ia]
    expect = lo_b[ia] + np.rint((pa - lo_a[ia] + 0.5) * span_b / span_a - 0.5).astype(np.int64)
    expect = np.where(has_b, expect, 0)
    # nearest b of the same group: rows are sorted by group, then position
    m = nb + 1
    comb_b = gid[b_rows] * m + pb
    q = gid[a_rows] * m + np.clip(expect, 0, nb)
    at = np.searchsorted(comb_b, q)
    best = np.full(len(a_rows), -1, np.int64)
    dist = np.full(len(a_rows), np.iinfo(np.int64).max)
    for cand in (at - 1, at):
        ok = (cand >= 0) & (cand < len(b_rows))
        c = np.clip(cand, 0, len(b_rows) - 1)
        ok &= gid[b_rows[c]] == gid[a_rows]
        d = np.abs(pb[c] - expect)
        better = ok & (d < dist)
        best = np.where(better, c, best)
        dist = np.where(better, d, dist)
    sel = (best >= 0) & has_b
    ca, cb, dd = pa[sel], pb[best[sel]], dist[sel]
    o = np.lexsort((dd, cb))
    first = np.r_[True, cb[o][1:] != cb[o][:-1]][: len(o)]
    keep = o[first]
    return ca[keep], cb[keep]


def _extend(sa, ka, ia, sb, kb, ib, twin_a) -> bool:  # type: ignore[no-untyped-def]
    """Pair the common prefix and the common suffix of every segment (the runs that continue an
    anchor): element r of a segment of one sequence with element r of the same segment of the
    other, from the front and from the back, up to the first mismatch. The two runs of a segment
    never share an element (then they cannot cross either)."""
    used_a = np.zeros(len(ka), bool)
    used_b = np.zeros(len(kb), bool)
    for back in (False, True):
        ra, rb = _rank_in_segment(sa, back), _rank_in_segment(sb, back)
        big = max(len(ra), len(rb)) + 1
        ca, cb = sa * big + ra, sb * big + rb
        o = np.argsort(cb, kind="stable")
        at = np.searchsorted(cb[o], ca)
        at_ok = at < len(cb)
        hit = np.zeros(len(ca), bool)
        hit[at_ok] = cb[o][at[at_ok]] == ca[at_ok]
        j = o[np.minimum(at, len(cb) - 1)]
        eq = hit & (kb[j] == ka)
        bad = np.cumsum(~eq)
        idx = np.arange(len(sa))
        if back:  # ranks count from the end: no mismatch from here to the segment's end
            run = eq & (bad[idx + ra] == bad) & ~used_a & ~used_b[j]
        else:  # no mismatch from the segment's start to here
            seg_start = idx - ra
            run = bad - bad[seg_start] + (~eq)[seg_start] == 0
        used_a |= run
        used_b[j[run]] = True
        twin_a[ia[run]] = ib[j[run]]
    return bool(used_a.any())


def _rank_in_segment(seg: np.ndarray, back: bool) -> np.ndarray:
    """Position of each element within its (contiguous) segment, from the front or the back."""
    n = len(seg)
    idx = np.arange(n)
    if back:
        last = np.r_[seg[1:] != seg[:-1], True]
        end = np.minimum.accumulate(np.where(last, idx, n)[::-1])[::-1]
        return end - idx
    first = np.r_[True, seg[1:] != seg[:-1]]
    return idx - np.maximum.accumulate(np.where(first, idx, 0))


def _segments_common(proc: np.ndarray, matched: np.ndarray, top: int) -> np.ndarray:
    """Per element: (processor, anchors before it) as one id, equal for the same segment of both
    sequences (their anchors are paired in order)."""
    before = np.cumsum(matched) - matched
    return before * (top + 1) + proc


def increasing_subsequence(values: np.ndarray) -> np.ndarray:
    """Indices of a longest strictly increasing subsequence of ``values`` (O(n log n))."""
    n = len(values)
    if n == 0 or np.all(np.diff(values) > 0):
        return np.arange(n)
    vals = values.tolist()
    tails: list[int] = []  # value of the smallest tail of an increasing run of each length
    tail_at: list[int] = []  # its index
    prev = [-1] * n
    for i, v in enumerate(vals):
        j = bisect.bisect_left(tails, v)
        if j == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[j] = v
            tail_at[j] = i
        prev[i] = tail_at[j - 1] if j else -1
    out = []
    i = tail_at[-1]
    while i >= 0:
        out.append(i)
        i = prev[i]
    return np.asarray(out[::-1], np.int64)
