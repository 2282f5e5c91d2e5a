"""Stragglers: ranks that are significantly and materially slower than their peers, with the evidence.

In synchronous training every member of a collective waits inside the kernel for the last one to
arrive, so a slow rank hides in the *others'* communication time, and every rank's iteration ends up
about as long. What gives it away is its **arrival** at each collective compared with the other
members of the same instance, and, when its GPU is what is slow, its **kernels** compared with the
same kernels on the other ranks (:mod:`lumos_core.replay.straggler_evidence`). A rank is flagged only
on evidence that the job's own spread cannot explain; either of:

* **a slow GPU**: its compute kernels ran a ``slowdown`` longer than the same kernels on its peers,
  an outlier among the ranks (robust z-score above ``MIN_Z`` = 3.5 against the *other* ranks' median
  and median absolute deviation, floored at ``MIN_SCALE``; found by an outward search, Rosner's
  generalised ESD, so that two slow ranks do not hide each other: :func:`_outward_search`), consistently (sign test over its kernels,
  p below ``ALPHA`` = 1 % over the number of ranks: Bonferroni), by at least ``REL_LATE`` = 1 % (the
  smallest slowdown worth acting on: the whole job waits for it). Its arrivals are not required
  to be late: an arrival sign test against 0.5 is biased by the rank's place in its group (in
  synthetic Megatron jobs the second rank of every tensor-parallel pair, slowed or not, is after
  its partner at 99 of 132 all-reduces), and it loses a tensor-parallel pair slowed together
  (neither is later than the other, and at the data-parallel all-reduces the pair arrives as its
  unslowed peers do: the wait shows at the pipeline's point-to-point transfers, left out here);
  on every synthetic and real job measured it never kept out a false flag;
* **repeated delays**: it arrives more than ``max(MIN_LATE_NS, REL_LATE x median iteration)`` late by
  its own doing (not a wait inherited from an earlier collective) at more collectives than the other
  ranks' rate of such delays *at the same position* (collective kind, group size, place in the group:
  :func:`null_late_rate`) explains (binomial test, same bound, ``MIN_LATE_COUNT`` = 2 times or
  more), and those delays cost it more per iteration than its peers' delays do, by a margin the
  job's own iteration spread cannot explain: the excess (its delays per iteration, over every
  iteration they fall in, minus the median of its peers': jitter alone makes every rank late now
  and then, so the sum of the late ones is never 0) must exceed ``z x spread / sqrt(iterations)``,
  the spread being the standard deviation of the steady iterations, ``/ sqrt`` because the excess
  is a mean over the iterations, and ``z`` the one-sided normal quantile of the same Bonferroni
  bound (3.0 for 8 ranks, 3.6 for 64, 4.0 for 256): in a big job *some* rank is always the most
  delayed, and the bound grows with the number of ranks as that maximum does. And the excess must
  be ``REL_LATE`` of the iteration or more.

50 µs is above the clock alignment error between ranks and ordinary launch jitter. A rank without
group collectives (a job of independent ranks) is flagged when *every* steady iteration of it is
longer than that iteration's median over its peers (:func:`peer_sets`: in a pipeline, its stage) by
more than the threshold and the iteration spread. Point-to-point transfers are left out: a pipeline
stage's receive starts whenever its schedule says, not when a peer is slow.

The ``reason`` of a rank (the first column of the app's table) says the cause (compute: slower or
more GPU kernels than its peers; host: launches, data loading, Python), by how much, and at which
collectives. Checked on synthetic jobs with known slow ranks (``lumos synth --slow-rank``) and on
the shared real traces (tests/test_stragglers.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from lumos_core.replay.breakdown import iteration_windows, steady_windows
from lumos_core.replay.straggler_evidence import (
    arrivals,
    binomial_tail,
    compute_per_iteration,
    kernel_slowdowns,
    null_late_rate,
    robust_scale,
)
from lumos_core.trace.kernel_families import event_families
from lumos_core.trace.model import CollectiveKind, Job

MIN_LATE_NS = 50_000
REL_LATE = 0.01
ALPHA = 0.01
MIN_Z = 3.5
MIN_SCALE = 0.005  # the ranks' slowdowns are never assumed to agree closer than 0.5 %
_NONE = np.zeros(0, np.int64)
MIN_LATE_COUNT = 2  # one delay is a hiccup, never a pattern


@dataclass
class LateCollective:
    instance: int
    kind: str
    group: str
    late_ns: int  # after the median arrival of the instance's other members


@dataclass
class RankLateness:
    rank: int  # global rank
    rank_index: int  # index into job.ranks
    n_collectives: int  # group collectives (not point-to-point) this rank took part in
    n_late: int  # of which it arrived late by its own doing (beyond the threshold)
    mean_late_ns: float  # mean lateness over the late ones (0 when none)
    max_late_ns: int
    iteration_late_ns: int  # worst excess of an iteration over that iteration's median over peers
    worst: list[LateCollective] = field(default_factory=list)  # latest first, a few
    flagged: bool = False
    why: str = ""  # the reason, as in ``reason`` (kept for the overview's tooltip)
    slowdown: float = float("nan")  # median excess of its own work between collectives (0.05: 5 %)
    z: float = float("nan")  # robust z-score of the slowdown among the ranks
    p_value: float = 1.0  # the smaller of the two tests' (before Bonferroni)
    p_late: float = 1.0  # the repeated-delay test's alone
    cause: str = ""  # "compute", "host" or "" (not flagged)
    reason: str = ""  # how late, where, compute or host; or why it is not flagged

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "flagged": self.flagged,
            "reason": self.reason,
            "cause": self.cause,
            "collectives": self.n_collectives,
            "late": self.n_late,
            "mean_late_us": round(self.mean_late_ns / 1e3, 1),
            "max_late_us": round(self.max_late_ns / 1e3, 1),
            "slowdown": None if np.isnan(self.slowdown) else round(self.slowdown, 4),
            "z": None if np.isnan(self.z) else round(self.z, 2),
            "p_value": float(f"{self.p_value:.3g}"),
            "p_late": float(f"{self.p_late:.3g}"),  # the p the reason quotes
        }


@dataclass
class StragglerReport:
    threshold_ns: int
    median_iteration_ns: int
    ranks: list[RankLateness]  # every rank, job order
    iteration_spread_ns: float = 0.0  # standard deviation of the steady iterations (0: unknown)

    @property
    def flagged(self) -> list[RankLateness]:
        """The stragglers, most delayed first."""
        return sorted(
            (r for r in self.ranks if r.flagged),
            key=lambda r: (-np.nan_to_num(r.slowdown), -r.n_late * r.mean_late_ns, -r.iteration_late_ns),
        )

    def as_dict(self) -> dict[str, Any]:
        """What ``lumos replay --json`` prints under ``stragglers``."""
        return {
            "flagged": [r.rank for r in self.flagged],
            "threshold_us": round(self.threshold_ns / 1e3, 1),
            "median_iteration_ms": round(self.median_iteration_ns / 1e6, 3),
            "iteration_spread_ms": round(self.iteration_spread_ns / 1e6, 3),
            "ranks": [r.as_dict() for r in self.ranks if r.flagged or r.n_late],
            "definition": DEFINITION,
        }


DEFINITION = (
    "flagged: its compute kernels are slower than the same kernels on its peers (robust z > 3.5 "
    "among the ranks, the most extreme taken out one at a time so that two do not mask each other; sign test p < 1 % / ranks, at least 1 %); or it arrives late by its own doing (> max(50 µs, 1 % "
    "of the iteration)) more often than the other ranks do at the same place in the same kind of "
    "group (binomial test, p < 1 % / ranks, 2 or "
    "more times) and those delays cost it more per iteration than its peers' by over z x the "
    "iterations' spread / sqrt(iterations) (z: the normal quantile of 1 % / ranks). p_value: the smaller of the "
    "two tests' p (kernel sign test, p_late: repeated-delay test), before dividing by the ranks"
)


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


def iteration_excess(job: Job, peers: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Per rank index: the worst and the least (iteration time − that iteration's median over the
    rank's peers) over its steady iterations; the job's median iteration time (0 without
    iterations) and its iteration spread (standard deviation of each rank's iterations around the
    rank's mean, pooled; 0 when unknown)."""
    peers = peers if peers is not None else np.zeros(len(job.ranks), int)
    names: dict[tuple[str, int], list[tuple[int, int]]] = {}
    dev, dof = 0.0, 0
    for ri, t in enumerate(job.ranks):
        wins = steady_windows(t) if t.iterations else []
        d = np.asarray([w.end - w.start for w in wins], float)
        if len(d) >= 2:
            dev += float(((d - d.mean()) ** 2).sum())
            dof += len(d) - 1
        for w in wins:
            names.setdefault((w.name, int(peers[ri])), []).append((ri, int(w.end - w.start)))
    worst = np.zeros(len(job.ranks), np.int64)
    least = np.full(len(job.ranks), np.iinfo(np.int64).max)
    durs = [d for rows in names.values() for _ri, d in rows]
    for rows in names.values():
        if len(rows) < 2:
            continue
        med = int(np.median([d for _ri, d in rows]))
        for ri, d in rows:
            worst[ri] = max(worst[ri], d - med)
            least[ri] = min(least[ri], d - med)
    least[least == np.iinfo(np.int64).max] = 0
    spread = float(np.sqrt(dev / dof)) if dof else 0.0
    return worst, least, int(np.median(durs)) if durs else 0, spread


def find_stragglers(job: Job, worst_per_rank: int = 5) -> StragglerReport:
    """Evidence for every rank and the flagged stragglers (see the module docstring)."""
    a = arrivals(job)
    peers = peer_sets(job, a.who, a.inst)
    worst_it, least_it, med_iter, spread = iteration_excess(job, peers)
    # delays are counted over every iteration they happen in (not only the steady ones)
    n_iter = np.asarray([max(1, len(iteration_windows(t)) if t.iterations else 1) for t in job.ranks], float)
    threshold = max(MIN_LATE_NS, int(REL_LATE * med_iter))
    n_ranks = len(job.ranks)
    bound = ALPHA / max(n_ranks, 1)
    n_coll = np.bincount(a.who, minlength=n_ranks)
    is_late = a.own > threshold
    n_late = np.bincount(a.who[is_late], minlength=n_ranks)
    sum_late = np.bincount(a.who[is_late], weights=a.own[is_late], minlength=n_ranks)
    max_late = np.zeros(n_ranks, np.int64)
    if len(a.who):
        np.maximum.at(max_late, a.who, a.own)
    families = [event_families(t) for t in job.ranks]
    slow, z, p_sign, outlier = _slowdowns(job, peers, families)
    compute = compute_per_iteration(job, families)
    cost = sum_late / n_iter  # what its delays cost per iteration
    expected = np.bincount(a.who, weights=null_late_rate(job, a, is_late), minlength=n_ranks)
    z_bound = NormalDist().inv_cdf(1.0 - bound)
    rows = np.flatnonzero(is_late)
    rows = rows[np.argsort(a.who[rows], kind="stable")]
    heads = np.flatnonzero(np.r_[True, a.who[rows][1:] != a.who[rows][:-1]]) if len(rows) else rows
    late_rows = {int(a.who[rows[h]]): part for h, part in zip(heads.tolist(), np.split(rows, heads[1:]))}
    out = []
    for ri, t in enumerate(job.ranks):
        mine = late_rows.get(ri, _NONE)
        # binomial with the mean of its arrivals' null rates (a Poisson-binomial's tail, nearly)
        p0 = expected[ri] / n_coll[ri] if n_coll[ri] else 0.0
        p_late = binomial_tail(int(n_late[ri]), int(n_coll[ri]), p0) if n_coll[ri] else 1.0
        per_iter = float(cost[ri])
        excess = per_iter - _peer_median(cost, peers, ri)
        need = max(z_bound * spread / np.sqrt(n_iter[ri]), REL_LATE * med_iter)
        persistent = bool(outlier[ri] and slow[ri] >= REL_LATE and p_sign[ri] < bound)
        delayed = bool(n_late[ri] >= MIN_LATE_COUNT and p_late < bound and excess > need)
        alone = bool(
            n_coll[ri] == 0
            and len(steady_windows(t) if t.iterations else []) >= 2
            and least_it[ri] > max(threshold, spread)
        )
        rl = RankLateness(
            rank=t.rank,
            rank_index=ri,
            n_collectives=int(n_coll[ri]),
            n_late=int(n_late[ri]),
            mean_late_ns=float(sum_late[ri] / n_late[ri]) if n_late[ri] else 0.0,
            max_late_ns=int(max(max_late[ri], 0)),
            iteration_late_ns=int(max(worst_it[ri], 0)),
            worst=_worst(job, a, mine, worst_per_rank),
            flagged=persistent or delayed or alone,
            slowdown=float(slow[ri]),
            z=float(z[ri]),
            p_value=float(min(p_sign[ri], p_late)),
            p_late=float(p_late),
        )
        extra = 0.0
        if persistent:
            rl.cause = "compute"
        elif rl.flagged:
            rl.cause, extra = _cause(compute, peers, ri, per_iter)
        rl.reason = _reason(
            rl,
            (persistent, delayed, alone),
            job,
            a,
            mine,
            (per_iter, excess, need, spread, extra),
            bound,
            least_it[ri],
        )
        rl.why = rl.reason if rl.flagged else ""
        out.append(rl)
    return StragglerReport(threshold, med_iter, out, spread)


def _slowdowns(
    job: Job, peers: np.ndarray, families: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per rank: how much slower its kernels are than the same kernels elsewhere, the robust z-score
    of that among the ranks, the kernel sign test's p, and whether the outward search
    (:func:`_outward_search`) finds it an outlier among the ranks."""
    n_ranks = len(job.ranks)
    slow, p_kernel = kernel_slowdowns(job, peers, families)
    z = np.full(n_ranks, np.nan)
    outlier = np.zeros(n_ranks, bool)
    known = np.flatnonzero(~np.isnan(slow))
    if len(known) >= 4:
        order, z_at, steps = _outward_search(slow, known)
        n_out = max((k + 1 for k, zk in enumerate(z_at) if zk > MIN_Z), default=0)
        z[known] = steps[min(n_out, len(steps) - 1)][known]
        for k in range(n_out):  # an outlier's z is the one it had when it was the most extreme
            z[order[k]] = z_at[k]
            outlier[order[k]] = True
    return slow, z, p_kernel, outlier


def _outward_search(slow: np.ndarray, known: np.ndarray) -> tuple[list[int], list[float], list[np.ndarray]]:
    """Rosner's generalised extreme-studentised-deviate search, with robust z-scores: step ``k``
    scores every remaining rank against the others (leave-one-out median and MAD, floored at
    ``MIN_SCALE``), takes out the most extreme and goes on, up to ``max(2, ranks / 16)`` steps. The
    caller flags the first ``k`` taken out for the largest ``k`` whose z exceeds ``MIN_Z``: two slow
    ranks widen each other's reference (masking: both at z 3.1 among 8 ranks), but once the first is
    out the second stands out, and then both are outliers. Returns the ranks in the order taken out,
    their z when taken out, and the z-scores of every step (NaN for ranks already out)."""
    k_max = max(2, len(known) // 16)
    ref, order, z_at, steps = known, [], [], []
    while len(ref) >= 4:
        zk = np.full(len(slow), np.nan)
        for ri in ref.tolist():  # leave-one-out: a rank does not widen the spread it is judged by
            rest = slow[ref[ref != ri]]
            zk[ri] = (slow[ri] - float(np.median(rest))) / max(robust_scale(rest), MIN_SCALE)
        steps.append(zk)
        if len(order) == k_max:
            break
        top = int(ref[np.argmax(zk[ref])])
        order.append(top)
        z_at.append(float(zk[top]))
        ref = ref[ref != top]
    return order, z_at, steps


def _peer_median(value: np.ndarray, peers: np.ndarray, ri: int) -> float:
    """The median of ``value`` over rank ``ri``'s peers (its pipeline stage), or over every other
    rank when it has none; 0 for a job of one rank."""
    same = peers == peers[ri]
    same[ri] = False
    if not same.any():
        same = np.ones(len(value), bool)
        same[ri] = False
    return float(np.median(value[same])) if same.any() else 0.0


def _worst(job: Job, a: Any, mine: np.ndarray, k: int) -> list[LateCollective]:
    match = job.collective_match
    got = []
    for j in mine[np.argsort(-a.own[mine], kind="stable")][:k]:
        i = int(a.inst[j])
        got.append(LateCollective(i, CollectiveKind(int(match.kind[i])).label, match.group[i], int(a.own[j])))
    return got


def _cause(compute: np.ndarray, peers: np.ndarray, ri: int, cost_ns: float) -> tuple[str, float]:
    """("compute", extra ns) when the rank's GPU compute per iteration exceeds its peers' median by
    half or more of what its lateness costs per iteration, else ("host", extra): the GPU was not
    what kept it (launches, data loading, Python)."""
    same = (peers == peers[ri]) & ~np.isnan(compute)
    same[ri] = False
    if not same.any():
        same = ~np.isnan(compute)
        same[ri] = False
    if np.isnan(compute[ri]) or not same.any():
        return "host", 0.0
    extra = compute[ri] - float(np.median(compute[same]))
    return ("compute" if extra >= 0.5 * cost_ns else "host"), extra


def _where(job: Job, a: Any, rows: np.ndarray) -> str:
    match = job.collective_match
    count = Counter(
        f"{CollectiveKind(int(match.kind[i])).label} [{match.group[i]}]" for i in a.inst[rows].tolist()
    )
    return ", ".join(f"{k} ×{n}" for k, n in count.most_common(3))


def _reason(
    rl: RankLateness,
    tests: tuple[bool, bool, bool],
    job: Job,
    a: Any,
    mine: np.ndarray,
    costs: tuple[float, float, float, float, float],
    bound: float,
    least_it: int,
) -> str:
    """The first column of the Stragglers table: the cause, by how much, and where."""
    persistent, delayed, alone = tests
    per_iter, excess, need, spread, extra = costs
    if persistent:
        later = np.flatnonzero((a.who == rl.rank_index) & (a.late > 0))
        return (
            f"compute: kernels {100 * rl.slowdown:.1f} % slower than the same kernels on other ranks "
            f"(z {rl.z:.1f}); later than the others at {len(later)} of {rl.n_collectives} collectives "
            f"({_where(job, a, later)})"
        )
    if delayed:
        cause = (
            f"compute: {extra / 1e6:+.2f} ms of GPU kernels per iteration beside its peers"
            if rl.cause == "compute"
            else "host side (its GPU work is as its peers')"
        )
        return (
            f"{cause}; late at {rl.n_late} of {rl.n_collectives} collectives by "
            f"{rl.mean_late_ns / 1e3:,.0f} µs on average ({_where(job, a, mine)}): "
            f"{per_iter / 1e6:.2f} ms per iteration, {excess / 1e6:.2f} ms more than its peers' "
            f"(needs > {need / 1e6:.2f} ms: the iterations' own spread is {spread / 1e6:.2f} ms)"
        )
    if alone:
        return f"every iteration at least {least_it / 1e3:,.0f} µs longer than its peers' median"
    if rl.n_late:
        return (
            f"not a straggler: late at {rl.n_late} of {rl.n_collectives} collectives, within what "
            f"the other ranks show (p {rl.p_late:.2g}, needs < {bound:.2g}), or costing "
            f"{excess / 1e6:.2f} ms per iteration more than its peers' delays, within the iterations' "
            f"own spread ({spread / 1e6:.2f} ms)"
        )
    return ""
