"""The measurements straggler detection (:mod:`lumos_core.replay.stragglers`) tests: per arrival of a
rank at a group collective, how late it was and how much of that was its own doing; per rank, its
GPU compute per iteration; and the two statistics the tests need (a median of the *other* members,
a binomial tail) without scipy.

A rank's arrival at a collective is late by ``late`` = its arrival minus the median arrival of the
other members. Part of that may be inherited: a rank that waited longer at its previous collective
(for a slow peer of *that* collective) leaves it later and arrives later at the next one through no
fault of its own. Its *own work* before the arrival is the gap since it was last released (the end
of its latest earlier collective) and ``own`` = its gap minus the median gap of the other members,
capped at ``late`` (a gap that began early cannot make a rank later than it is). Gaps come from one
rank's clock, so clock-alignment error does not enter them.

A rank whose GPU is slow shows it in its kernels: :func:`kernel_slowdowns` compares each rank's
compute kernels with the same kernels on the other ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lumos_core.replay.breakdown import steady_windows
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, CollectiveKind, Job, Kind

_P2P = [int(k) for k in CollectiveKind if k.is_p2p]
REFERENCE_QUANTILE = 0.25


@dataclass
class Arrivals:
    """One row per arrival of a rank at a group collective with two or more members in the trace."""

    who: np.ndarray  # rank index (into job.ranks)
    inst: np.ndarray  # collective instance
    late: np.ndarray  # ns after the median arrival of the other members
    own: np.ndarray  # ns of that lateness not inherited from earlier collectives (<= late)

    @classmethod
    def empty(cls) -> Arrivals:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z)


def median_of_others(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per row: the (lower) median of ``value`` over the *other* rows of its group; NaN for a row
    alone in its group (:func:`quantile_of_others` at 0.5: ``floor((c - 2) / 2)``)."""
    return quantile_of_others(group, value, 0.5)


def arrivals(job: Job) -> Arrivals:
    """Every rank's arrivals at group collectives (point-to-point left out: a pipeline stage's
    receive starts when its schedule says, not when a peer is slow)."""
    match = job.collective_match
    if match is None or match.n_instances == 0:
        return Arrivals.empty()
    who_l, inst_l, start_l, rel_l = [], [], [], []
    for ri, t in enumerate(job.ranks):
        inst = match.instance.get(t.rank)
        if inst is None or len(inst) == 0:
            continue
        ok = (inst >= 0) & ~np.isin(match.kind[np.maximum(inst, 0)], _P2P)
        ev = t.collectives.event[ok]
        start = t.start[ev].astype(np.int64)
        end = start + t.dur[ev].astype(np.int64)
        order = np.argsort(start, kind="stable")
        # released: the latest end of the rank's collectives that began before this one
        released = np.full(len(order), -1, np.int64)
        if len(order) > 1:
            released[order[1:]] = np.maximum.accumulate(end[order])[:-1]
        released[released > start] = -1  # still inside an overlapping collective: unknown
        who_l.append(np.full(len(ev), ri, np.int64))
        inst_l.append(inst[ok].astype(np.int64))
        start_l.append(start)
        rel_l.append(released)
    if not inst_l:
        return Arrivals.empty()
    who, inst = np.concatenate(who_l), np.concatenate(inst_l)
    start, released = np.concatenate(start_l), np.concatenate(rel_l)
    late = start - median_of_others(inst, start)
    keep = ~np.isnan(late)  # instances with two or more members here
    who, inst, start, released, late = who[keep], inst[keep], start[keep], released[keep], late[keep]
    known = released >= 0
    gap = (start - released).astype(float)
    others_gap = np.full(len(inst), np.nan)
    others_gap[known] = median_of_others(inst[known], gap[known])
    excess = gap - others_gap
    has = known & ~np.isnan(others_gap) & (others_gap > 0)
    own = late.copy()
    own[has] = np.minimum(late[has], excess[has])
    return Arrivals(who, inst, late.astype(np.int64), own.astype(np.int64))


def kernel_slowdowns(
    job: Job, peers: np.ndarray, families: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Per rank index: how much longer its compute kernels ran than the same kernels (by name) on the
    other ranks (0.05: 5 % longer; NaN without kernels it shares with another rank), and the sign
    test's p that its kernels are longer than that reference more often than not.

    The reference is what the rank's own kernels would have taken at the other ranks' durations:
    per kernel name, each rank's median, and of the other ranks' medians the lower quartile, so that
    even several slow ranks among few peers do not move it (every rank is compared the same way, so
    the small offset this gives all of them cancels between ranks). Ranks doing different work
    (pipeline stages, uneven optimizer shards) compare only where they ran the same thing, and with
    their ``peers`` (a label per rank: in a pipeline, the ranks of its stage, whose kernels of one
    name have the same shapes) when the rank has any. Communication kernels are left out: their
    duration includes the wait for the last member. ``families``: :func:`event_families` per rank."""
    n_ranks = len(job.ranks)
    gid_of: dict[str, int] = {}
    rows_r, rows_g, rows_med, rows_n = [], [], [], []
    events: list[tuple[np.ndarray, np.ndarray]] = []  # per rank: (row of its (rank, name), duration)
    first_row = 0
    for ri, t in enumerate(job.ranks):
        fam = families[ri]
        sel = np.flatnonzero(
            (t.kind == Kind.KERNEL) & ((fam < Family.NCCL_ALL_REDUCE) | (fam > Family.NCCL_OTHER))
        )
        uniq, inv = np.unique(t.name[sel], return_inverse=True)
        gids = np.asarray(
            [gid_of.setdefault(t.strings[int(u)], len(gid_of)) for u in uniq.tolist()], np.int64
        )
        d = t.dur[sel].astype(float)
        order = np.lexsort((d, inv))
        counts = np.bincount(inv, minlength=len(uniq))
        lo = np.r_[0, np.cumsum(counts)[:-1]]
        ds = d[order]
        med = (ds[lo + (counts - 1) // 2] + ds[lo + counts // 2]) / 2 if len(uniq) else np.zeros(0)
        rows_r.append(np.full(len(uniq), ri, np.int64))
        rows_g.append(gids)
        rows_med.append(med)
        rows_n.append(counts)
        events.append((first_row + inv, d))
        first_row += len(uniq)
    slow = np.full(n_ranks, np.nan)
    p = np.ones(n_ranks)
    if first_row == 0:
        return slow, p
    r, g = np.concatenate(rows_r), np.concatenate(rows_g)
    med, n = np.concatenate(rows_med), np.concatenate(rows_n)
    alone = np.bincount(peers, minlength=int(peers.max(initial=0)) + 1)[peers] < 2
    group = np.where(alone[r], -1, peers[r]) * (len(gid_of) + 1) + g  # (peer set, name); -1: every rank
    ref = quantile_of_others(group, med, REFERENCE_QUANTILE)
    ok = ~np.isnan(ref)
    own_t = np.bincount(r[ok], weights=(med * n)[ok], minlength=n_ranks)
    ref_t = np.bincount(r[ok], weights=(ref * n)[ok], minlength=n_ranks)
    for ri, (row, d) in enumerate(events):
        re = ref[row]
        has = ~np.isnan(re)
        if ref_t[ri] > 0:
            slow[ri] = own_t[ri] / ref_t[ri] - 1.0
            p[ri] = binomial_tail(int((d[has] > re[has]).sum()), int((d[has] != re[has]).sum()), 0.5)
    return slow, p


def quantile_of_others(group: np.ndarray, value: np.ndarray, q: float) -> np.ndarray:
    """Per row: the ``q`` quantile (the lower one, as numpy's ``method="lower"``) of ``value`` over the
    *other* rows of its group; NaN for a row alone in its group. Leaving out the row at sorted
    position ``i`` of ``c`` puts that quantile at position ``k = floor(q (c - 2))`` of the rest, which
    is ``k`` or ``k + 1`` of the group."""
    out = np.full(len(group), np.nan)
    if len(group) == 0:
        return out
    order = np.lexsort((value, group))
    gs, vs = group[order], value[order].astype(float)
    heads = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    counts = np.diff(np.r_[heads, len(gs)])
    seg = np.repeat(np.arange(len(heads)), counts)
    pos = np.arange(len(gs)) - heads[seg]
    c = counts[seg]
    k = np.floor(q * (c - 2)).astype(np.int64)
    pick = heads[seg] + k + (k >= pos)
    ok = c >= 2
    res = np.full(len(gs), np.nan)
    res[ok] = vs[pick[ok]]
    out[order] = res
    return out


def compute_per_iteration(job: Job, families: list[np.ndarray]) -> np.ndarray:
    """Per rank index: GPU time of compute kernels (communication left out) per steady iteration,
    in ns; NaN for a rank without iterations. ``families``: :func:`event_families` per rank."""
    out = np.full(len(job.ranks), np.nan)
    gpu = np.asarray(GPU_ACTIVITY_KINDS, np.int8)
    for ri, t in enumerate(job.ranks):
        wins = steady_windows(t) if t.iterations else []
        if not wins:
            continue
        fam = families[ri]
        nccl = (fam >= Family.NCCL_ALL_REDUCE) & (fam <= Family.NCCL_OTHER)
        inside = (t.start >= wins[0].start) & (t.start < wins[-1].end)
        sel = np.isin(t.kind, gpu) & ~nccl & inside
        out[ri] = float(t.dur[sel].sum()) / len(wins)
    return out


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    i = np.arange(k, n + 1)
    log_fact = np.r_[0.0, np.cumsum(np.log(np.arange(1, n + 1)))]  # log(m!) for m = 0..n
    terms = log_fact[n] - log_fact[i] - log_fact[n - i] + i * math.log(p) + (n - i) * math.log1p(-p)
    top = float(terms.max())
    return min(1.0, math.exp(top) * float(np.exp(terms - top).sum()))


def robust_scale(x: np.ndarray) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal data, unmoved by a
    few outliers (the stragglers themselves)."""
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return 0.0
    return 1.4826 * float(np.median(np.abs(x - np.median(x))))


MIN_NULL_ARRIVALS = 30  # other ranks' arrivals a null rate is taken from; fewer: a coarser one


def null_late_rate(job: Job, a: Arrivals, is_late: np.ndarray) -> np.ndarray:
    """Per arrival: how often the *other* ranks are late at arrivals like it, the null of the
    repeated-delay test. "Like it" is the same collective kind, group size and position in the group
    (members ordered by rank): the late-arrival rate differs by position (in synthetic Megatron jobs
    the first rank of each tensor-parallel pair is late several times as often as the second), so
    pooling every rank would call a whole position's ranks stragglers. Where the other ranks have
    fewer than ``MIN_NULL_ARRIVALS`` such arrivals (a one-group job: every position is one rank),
    the rate is over the same kind and group size, then over every arrival. Laplace's rule of
    succession ((late + 1) / (arrivals + 2)) keeps a rate of 0 from making one delay significant."""
    n = len(a.who)
    if n == 0:
        return np.zeros(0)
    match = job.collective_match
    ranks = np.asarray([t.rank for t in job.ranks], np.int64)[a.who]
    order = np.lexsort((ranks, a.inst))
    i_s = a.inst[order]
    heads = np.flatnonzero(np.r_[True, i_s[1:] != i_s[:-1]])
    counts = np.diff(np.r_[heads, n])
    seg = np.repeat(np.arange(len(heads)), counts)
    pos, size = np.empty(n, np.int64), np.empty(n, np.int64)
    pos[order] = np.arange(n) - heads[seg]
    size[order] = counts[seg]
    kind = match.kind[a.inst].astype(np.int64)
    late = is_late.astype(float)
    rate = np.full(n, np.nan)
    for key in ((kind * 100_000 + size) * 100_000 + pos, kind * 100_000 + size, np.zeros(n, np.int64)):
        _, k = np.unique(key, return_inverse=True)
        kr = k * (int(a.who.max()) + 1) + a.who  # (key, rank)
        _, kr_i = np.unique(kr, return_inverse=True)
        n_k, l_k = np.bincount(k), np.bincount(k, weights=late)
        n_kr, l_kr = np.bincount(kr_i), np.bincount(kr_i, weights=late)
        others_n = n_k[k] - n_kr[kr_i]
        others_l = l_k[k] - l_kr[kr_i]
        use = np.isnan(rate) & (others_n >= MIN_NULL_ARRIVALS)
        rate[use] = (others_l[use] + 1) / (others_n[use] + 2)
    last = np.isnan(rate)  # a job with too few arrivals for any: every other rank's arrivals
    if last.any():
        tot_n, tot_l = np.bincount(a.who), np.bincount(a.who, weights=late)
        rate[last] = (late.sum() - tot_l[a.who[last]] + 1) / (n - tot_n[a.who[last]] + 2)
    return rate
