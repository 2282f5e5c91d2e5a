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
from lumos_core.trace.kernel_families import Family, event_families
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
    alone in its group. Vectorised: in a group sorted by value, leaving out the row at position
    ``i`` of ``c`` puts the median of the rest at position ``m = (c - 2) // 2``, or ``m + 1`` when
    ``m >= i``."""
    out = np.full(len(group), np.nan)
    if len(group) == 0:
        return out
    order = np.lexsort((value, group))
    g, v = group[order], value[order].astype(float)
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    counts = np.diff(np.r_[heads, len(g)])
    seg = np.repeat(np.arange(len(heads)), counts)
    pos = np.arange(len(g)) - heads[seg]
    c = counts[seg]
    m = (c - 2) // 2
    pick = heads[seg] + m + (m >= pos)
    ok = c >= 2
    res = np.full(len(g), np.nan)
    res[ok] = v[pick[ok]]
    out[order] = res
    return out


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


def kernel_slowdowns(job: Job, peers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per rank index: how much longer its compute kernels ran than the same kernels (by name) on the
    other ranks (0.05: 5 % longer; NaN without kernels it shares with another rank), and the sign
    test's p that its kernels are longer than the others' median more often than not.

    The reference is what the rank's own kernels would have taken at the other ranks' per-kernel
    durations (each rank's median; of those the lower quartile, so that even several slow ranks
    among few peers do not move it; every rank is compared the same way, so the small offset this
    gives all of them cancels in the comparison between ranks), so ranks doing different work (pipeline stages, uneven optimizer shards)
    compare only where they ran the same thing, and with their ``peers`` (a label per rank: in a
    pipeline, the ranks of its stage, whose kernels of one name have the same shapes) when the rank
    has any. Communication kernels are left out: their duration includes the wait for the last
    member."""
    per_rank: list[dict[str, tuple[float, int, np.ndarray]]] = []
    for t in job.ranks:
        fam = event_families(t)
        sel = np.flatnonzero((t.kind == Kind.KERNEL) & ((fam < Family.NCCL_ALL_REDUCE) | (fam > Family.NCCL_OTHER)))
        mine: dict[str, tuple[float, int, np.ndarray]] = {}
        if len(sel):
            names = t.name[sel]
            order = np.argsort(names, kind="stable")
            names, durs = names[order], t.dur[sel][order].astype(float)
            heads = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
            for lo, hi in zip(heads.tolist(), [*heads[1:].tolist(), len(names)]):
                d = durs[lo:hi]
                mine[t.strings[int(names[lo])]] = (float(np.median(d)), hi - lo, d)
        per_rank.append(mine)
    by_name: dict[tuple[str, int], list[float]] = {}
    for ri, mine in enumerate(per_rank):
        for name, (med, _n, _d) in mine.items():
            by_name.setdefault((name, int(peers[ri])), []).append(med)
            by_name.setdefault((name, -1), []).append(med)
    alone = np.bincount(peers, minlength=int(peers.max(initial=0)) + 1)[peers] < 2
    slow = np.full(len(job.ranks), np.nan)
    p = np.ones(len(job.ranks))
    for ri, mine in enumerate(per_rank):
        own = ref = 0.0
        above = total = 0
        for name, (med, n, d) in mine.items():
            meds = by_name[(name, -1 if alone[ri] else int(peers[ri]))]
            if len(meds) < 2:
                continue
            others = list(meds)
            others.remove(med)
            r = float(np.quantile(others, REFERENCE_QUANTILE, method="lower"))
            own += med * n
            ref += r * n
            above += int((d > r).sum())
            total += int((d != r).sum())
        if ref > 0:
            slow[ri] = own / ref - 1.0
            p[ri] = binomial_tail(above, total, 0.5)
    return slow, p


def compute_per_iteration(job: Job) -> np.ndarray:
    """Per rank index: GPU time of compute kernels (communication left out) per steady iteration,
    in ns; NaN for a rank without iterations."""
    out = np.full(len(job.ranks), np.nan)
    gpu = np.asarray(GPU_ACTIVITY_KINDS, np.int8)
    for ri, t in enumerate(job.ranks):
        wins = steady_windows(t) if t.iterations else []
        if not wins:
            continue
        fam = event_families(t)
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
    lp, lq = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        for i in range(k, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in terms))


def robust_scale(x: np.ndarray) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal data, unmoved by a
    few outliers (the stragglers themselves)."""
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return 0.0
    return 1.4826 * float(np.median(np.abs(x - np.median(x))))
