"""Stragglers: ranks that arrive late at their collectives or take longer per iteration than the rest.

In synchronous training every rank of a collective waits inside the kernel for the last one to
arrive, so a slow rank hides in the *others'* communication time, and every rank's iteration ends
up about as long. What gives the slow rank away is its **arrival**: the start of its collective
kernel compared with the other members of the same instance (matched across ranks by
:mod:`lumos_core.trace.collectives`). A rank's *lateness* at an instance is its arrival minus the
median arrival of the members, so one slow rank does not move the reference, and the instance's
other members are early by about nothing.

Threshold: a rank is late at an instance when it arrives more than
``max(MIN_LATE_NS, REL_LATE × median iteration time)`` after the median. 50 µs is above the clock
alignment error between ranks (the loader aligns clocks on NCCL exits, which agree to tens of µs)
and above ordinary launch jitter; 1 % of the iteration is the smallest delay worth acting on: the
whole job waits for it every time, so it costs that share of throughput. A rank is flagged as a
straggler when it is late at ``MIN_LATE_SHARE`` (a quarter) or more of the collectives it takes part
in, so one hiccup does not flag it, or when one of its steady iterations is longer than the median of
that iteration over its *peers* (:func:`peer_sets`: in a pipeline, its stage) by more than the
threshold (a rank that runs alone, or a job without collectives).
Point-to-point transfers are left out: a pipeline stage's receive starts whenever its schedule says,
not when a peer is slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.replay.breakdown import steady_windows
from lumos_core.trace.model import CollectiveKind, Job

MIN_LATE_NS = 50_000
REL_LATE = 0.01
MIN_LATE_SHARE = 0.25
_P2P = [int(k) for k in CollectiveKind if k.is_p2p]


@dataclass
class LateCollective:
    instance: int
    kind: str
    group: str
    late_ns: int  # after the median arrival of the instance's members


@dataclass
class RankLateness:
    rank: int  # global rank
    rank_index: int  # index into job.ranks
    n_collectives: int  # group collectives (not point-to-point) this rank took part in
    n_late: int  # of which it arrived late (beyond the threshold)
    mean_late_ns: float  # mean lateness over the late ones (0 when none)
    max_late_ns: int
    iteration_late_ns: int  # worst excess of an iteration over that iteration's median over ranks
    worst: list[LateCollective] = field(default_factory=list)  # latest first, a few
    flagged: bool = False
    why: str = ""


@dataclass
class StragglerReport:
    threshold_ns: int
    median_iteration_ns: int
    ranks: list[RankLateness]  # every rank, job order

    @property
    def flagged(self) -> list[RankLateness]:
        """The stragglers, latest first."""
        return sorted(
            (r for r in self.ranks if r.flagged), key=lambda r: -max(r.max_late_ns, r.iteration_late_ns)
        )


def arrival_lateness(job: Job) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank index, instance, lateness ns) of every group-collective arrival with two or more members."""
    match = job.collective_match
    if match is None or match.n_instances == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    who, inst_l, start_l = [], [], []
    for ri, t in enumerate(job.ranks):
        inst = match.instance.get(t.rank)
        if inst is None or len(inst) == 0:
            continue
        ok = inst >= 0
        ok &= ~np.isin(match.kind[np.maximum(inst, 0)], _P2P)
        inst_l.append(inst[ok].astype(np.int64))
        start_l.append(t.start[t.collectives.event[ok]].astype(np.int64))
        who.append(np.full(int(ok.sum()), ri, np.int64))
    if not inst_l:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    inst, start, who_a = np.concatenate(inst_l), np.concatenate(start_l), np.concatenate(who)
    order = np.lexsort((start, inst))
    inst, start, who_a = inst[order], start[order], who_a[order]
    heads = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]]) if len(inst) else np.zeros(0, np.int64)
    counts = np.diff(np.r_[heads, len(inst)])
    median = start[heads + (counts - 1) // 2]  # lower median: the arrivals are sorted per instance
    seg = np.repeat(np.arange(len(heads)), counts)
    keep = counts[seg] >= 2
    return who_a[keep], inst[keep], (start - median[seg])[keep]


def peer_sets(job: Job, who: np.ndarray, inst: np.ndarray) -> np.ndarray:
    """Per rank index, a label of its *peers*: the ranks connected to it through group collectives
    smaller than the whole job (TP and DP groups: in a pipeline, the ranks of one stage). Stages run
    different layers and their iterations differ in length by design, so a rank's iteration is
    compared with its peers' only. Without such collectives every rank is a peer of every other."""
    n = len(job.ranks)
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    if len(inst):
        order = np.argsort(inst, kind="stable")
        i_s, w_s = inst[order], who[order]
        heads = np.flatnonzero(np.r_[True, i_s[1:] != i_s[:-1]])
        for members in np.split(w_s, heads[1:]):
            if 1 < len(members) < n:
                root = find(int(members[0]))
                for m in members[1:]:
                    r = find(int(m))
                    if r != root:
                        parent[r] = root
    return np.asarray([find(i) for i in range(n)])


def iteration_excess(job: Job, peers: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Per rank index: the worst (iteration time − that iteration's median over the rank's peers),
    and the median iteration time of the job (0 without iterations). Steady iterations only: the
    last one ends with its own activity, which differs between pipeline stages."""
    peers = peers if peers is not None else np.zeros(len(job.ranks), int)
    names: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for ri, t in enumerate(job.ranks):
        if not t.iterations:
            continue
        for w in steady_windows(t):
            names.setdefault((w.name, int(peers[ri])), []).append((ri, int(w.end - w.start)))
    excess = np.zeros(len(job.ranks), np.int64)
    durs = [d for rows in names.values() for _ri, d in rows]
    for rows in names.values():
        if len(rows) < 2:
            continue
        med = int(np.median([d for _ri, d in rows]))
        for ri, d in rows:
            excess[ri] = max(excess[ri], d - med)
    return excess, int(np.median(durs)) if durs else 0


def find_stragglers(job: Job, worst_per_rank: int = 5) -> StragglerReport:
    """Lateness of every rank and the flagged stragglers (see the module docstring)."""
    who, inst, late = arrival_lateness(job)
    excess, med_iter = iteration_excess(job, peer_sets(job, who, inst))
    threshold = max(MIN_LATE_NS, int(REL_LATE * med_iter))
    match = job.collective_match
    n_ranks = len(job.ranks)
    n_coll = np.bincount(who, minlength=n_ranks)
    is_late = late > threshold
    n_late = np.bincount(who[is_late], minlength=n_ranks)
    sum_late = np.bincount(who[is_late], weights=late[is_late], minlength=n_ranks)
    max_late = np.zeros(n_ranks, np.int64)
    if len(who):
        np.maximum.at(max_late, who, late)
    out = []
    for ri, t in enumerate(job.ranks):
        worst: list[LateCollective] = []
        if n_late[ri]:
            mine = np.flatnonzero((who == ri) & is_late)
            for k in mine[np.argsort(-late[mine], kind="stable")][:worst_per_rank]:
                i = int(inst[k])
                worst.append(
                    LateCollective(i, CollectiveKind(int(match.kind[i])).label, match.group[i], int(late[k]))
                )
        reasons = []
        if n_coll[ri] and n_late[ri] >= max(1, MIN_LATE_SHARE * n_coll[ri]):
            reasons.append(
                f"late at {n_late[ri]} of {n_coll[ri]} collectives, by {sum_late[ri] / n_late[ri] / 1e3:,.0f} µs "
                f"on average (up to {max_late[ri] / 1e3:,.0f} µs)"
            )
        if excess[ri] > threshold:
            reasons.append(f"an iteration {excess[ri] / 1e3:,.0f} µs longer than the median")
        out.append(
            RankLateness(
                rank=t.rank,
                rank_index=ri,
                n_collectives=int(n_coll[ri]),
                n_late=int(n_late[ri]),
                mean_late_ns=float(sum_late[ri] / n_late[ri]) if n_late[ri] else 0.0,
                max_late_ns=int(max(max_late[ri], 0)),
                iteration_late_ns=int(max(excess[ri], 0)),
                worst=worst,
                flagged=bool(reasons),
                why="; ".join(reasons),
            )
        )
    return StragglerReport(threshold_ns=threshold, median_iteration_ns=med_iter, ranks=out)
