"""Summary tables of a loaded job: top kernels, collectives, iterations and their breakdown, clocks.

These are the panes people missed when the TensorBoard profiler plugin was deprecated, computed
headlessly so the app, the CLI and tests share them. Every table is a list of frozen dataclasses
(one per row) with plain values; :func:`write_csv` exports any of them.

Times are integer nanoseconds; sizes bytes; bandwidths GB/s (1e9 bytes per second).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from lumos_core.perf.costs import bus_factor  # NCCL-tests factors, shared with the communication model
from lumos_core.replay.breakdown import rank_breakdowns
from lumos_core.trace.kernel_families import Family, classify_names
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, CollectiveKind, Job, Kind, RankTrace

# ---------------------------------------------------------------- top kernels


@dataclass(frozen=True)
class KernelStat:
    """One GPU activity name, aggregated over the ranks asked for."""

    name: str
    family: str
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    share: float  # of all GPU activity time (summed, not a union) on those ranks
    ranks: int  # how many ranks ran it


def _rank_kernel_totals(rank: RankTrace) -> dict[str, tuple[int, int, int, int, int]]:
    """name -> (family, count, total, min, max) over the rank's GPU activities."""
    idx = np.flatnonzero(np.isin(rank.kind, GPU_ACTIVITY_KINDS))
    if len(idx) == 0:
        return {}
    names = rank.name[idx]
    dur = rank.dur[idx]
    uniq, inv = np.unique(names, return_inverse=True)
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    lo = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
    hi = np.zeros(len(uniq), np.int64)
    np.minimum.at(lo, inv, dur)
    np.maximum.at(hi, inv, dur)
    fam_by_name = classify_names([rank.strings[int(u)] for u in uniq])
    # memcpy/memset are decided by kind, whatever their name says
    kind_of = np.zeros(len(uniq), np.int8)
    kind_of[inv] = rank.kind[idx]
    fam_by_name = np.where(kind_of == Kind.MEMCPY, Family.MEMCPY, fam_by_name)
    fam_by_name = np.where(kind_of == Kind.MEMSET, Family.MEMSET, fam_by_name)
    return {
        rank.strings[int(u)]: (int(fam_by_name[k]), int(count[k]), int(total[k]), int(lo[k]), int(hi[k]))
        for k, u in enumerate(uniq)
    }


def top_kernels(job: Job, rank: int | None = None, limit: int | None = 50) -> list[KernelStat]:
    """GPU activities by total time, for one rank or (``rank=None``) summed over the job."""
    ranks = job.ranks if rank is None else [job.rank(rank)]
    acc: dict[str, list[int]] = {}
    for t in ranks:
        for name, (fam, n, tot, lo, hi) in _rank_kernel_totals(t).items():
            a = acc.get(name)
            if a is None:
                acc[name] = [fam, n, tot, lo, hi, 1]
            else:
                a[1] += n
                a[2] += tot
                a[3] = min(a[3], lo)
                a[4] = max(a[4], hi)
                a[5] += 1
    grand = sum(a[2] for a in acc.values()) or 1
    rows = [
        KernelStat(
            name=name,
            family=Family(a[0]).label,
            count=a[1],
            total_ns=a[2],
            mean_ns=a[2] / a[1],
            min_ns=a[3],
            max_ns=a[4],
            share=a[2] / grand,
            ranks=a[5],
        )
        for name, a in acc.items()
    ]
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    return rows if limit is None else rows[:limit]


@dataclass(frozen=True)
class FamilyStat:
    """GPU time per family (summed over events, so overlapping streams count twice)."""

    family: str
    count: int
    total_ns: int
    share: float


def family_totals(job: Job, rank: int | None = None) -> list[FamilyStat]:
    per: dict[str, list[int]] = {}
    for k in top_kernels(job, rank, limit=None):
        a = per.setdefault(k.family, [0, 0])
        a[0] += k.count
        a[1] += k.total_ns
    grand = sum(a[1] for a in per.values()) or 1
    rows = [FamilyStat(f, a[0], a[1], a[1] / grand) for f, a in per.items()]
    rows.sort(key=lambda r: -r.total_ns)
    return rows


# ---------------------------------------------------------------- collectives


@dataclass(frozen=True)
class CollectiveStat:
    """One collective instance (the same operation on every rank of its group).

    Durations are per rank; a rank that arrives early waits for the others inside the kernel, so
    ``dur_max`` includes waiting and ``dur_min`` (the last rank to arrive) is closest to the transfer
    itself. ``bus_bw_gbps`` therefore uses ``dur_min``; ``bus_bw_median_gbps`` the median duration.
    ``skew_ns`` is the spread of start times across ranks (after clock alignment).
    """

    instance: int
    kind: str
    group: str
    size_bytes: int  # -1 when no rank recorded it
    ranks: int  # ranks holding this instance in the trace
    group_size: int  # ranks that take part (n in the bus-bandwidth factor)
    start_ns: int  # earliest start over ranks
    dur_min_ns: int
    dur_median_ns: int
    dur_max_ns: int
    skew_ns: int
    bus_bw_gbps: float  # NaN when the size is unknown
    bus_bw_median_gbps: float
    # cut off by the profiling window: some rank lacks it, or launched it before the window (its
    # metadata, the size among it, is then usually missing)
    cut_off: bool = False


def collectives_table(job: Job) -> list[CollectiveStat]:
    """Every matched collective instance of the job, in order of first start; the instances cut off
    by the profiling window's edges come last (their sizes are mostly unknown)."""
    match = job.collective_match
    if match is None or match.n_instances == 0:
        return []
    inst_l, start_l, dur_l, size_l, early_l = [], [], [], [], []
    for t in job.ranks:
        inst = match.instance.get(t.rank)
        if inst is None or len(inst) == 0:
            continue
        ok = inst >= 0
        ev = t.collectives.event[ok]
        inst_l.append(inst[ok])
        start_l.append(t.start[ev])
        dur_l.append(t.dur[ev])
        size_l.append(t.collectives.size_bytes[ok])
        early_l.append(t.launch[ev] < 0)  # its launch lies before the window
    if not inst_l:
        return []
    inst = np.concatenate(inst_l)
    start = np.concatenate(start_l)
    dur = np.concatenate(dur_l)
    size = np.concatenate(size_l)
    early = np.concatenate(early_l)
    order = np.lexsort((dur, inst))  # by instance, then duration (for medians)
    inst, start, dur, size, early = inst[order], start[order], dur[order], size[order], early[order]
    heads = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    counts = np.diff(np.r_[heads, len(inst)])
    first = np.minimum.reduceat(start, heads)
    last = np.maximum.reduceat(start, heads)
    dmin = dur[heads]
    dmax = dur[heads + counts - 1]
    dmed = dur[heads + (counts - 1) // 2]
    smax = np.maximum.reduceat(size, heads)
    any_early = np.maximum.reduceat(early.astype(np.int8), heads) > 0
    rows = []
    for k, h in enumerate(heads):
        i = int(inst[h])
        kind = CollectiveKind(int(match.kind[i]))
        n = int(match.expected[i])
        factor = bus_factor(kind, n)
        sz = int(smax[k])
        rows.append(
            CollectiveStat(
                instance=i,
                kind=kind.label,
                group=match.group[i],
                size_bytes=sz,
                ranks=int(counts[k]),
                group_size=n,
                start_ns=int(first[k]),
                dur_min_ns=int(dmin[k]),
                dur_median_ns=int(dmed[k]),
                dur_max_ns=int(dmax[k]),
                skew_ns=int(last[k] - first[k]),
                bus_bw_gbps=_bandwidth(sz, factor, int(dmin[k])),
                bus_bw_median_gbps=_bandwidth(sz, factor, int(dmed[k])),
                cut_off=bool(any_early[k]) or int(counts[k]) < n,
            )
        )
    rows.sort(key=lambda r: (r.cut_off, r.start_ns, r.instance))
    return rows


def _bandwidth(size: int, factor: float, dur_ns: int) -> float:
    if size < 0 or dur_ns <= 0:
        return math.nan
    return size * factor / dur_ns  # bytes per ns == GB/s


# ---------------------------------------------------------------- iterations


@dataclass(frozen=True)
class IterationStat:
    """One iteration window of one rank and its breakdown (see :mod:`lumos_core.replay.breakdown`)."""

    rank: int
    iteration: str
    start_ns: int
    dur_ns: int
    exposed_compute_ns: int
    overlapped_ns: int
    exposed_comm_ns: int
    other_ns: int  # the rest of the window: no compute or communication (idle)


def iteration_table(job: Job) -> list[IterationStat]:
    """Per rank, per iteration: the breakdown of :func:`lumos_core.replay.breakdown.rank_breakdowns`."""
    rows = []
    for t in job.ranks:
        for w, b in rank_breakdowns(t):
            rows.append(
                IterationStat(
                    rank=t.rank,
                    iteration=w.name,
                    start_ns=w.start,
                    dur_ns=w.length,
                    exposed_compute_ns=b.exposed_compute_ns,
                    overlapped_ns=b.overlapped_ns,
                    exposed_comm_ns=b.exposed_comm_ns,
                    other_ns=b.other_ns,
                )
            )
    return rows


@dataclass(frozen=True)
class RankBreakdownStat:
    """A rank's breakdown summed over its iterations (the bar chart's bars)."""

    rank: int
    iterations: int
    mean_iteration_ns: float
    exposed_compute_ns: int
    overlapped_ns: int
    exposed_comm_ns: int
    other_ns: int


def rank_breakdown_table(rows: Sequence[IterationStat]) -> list[RankBreakdownStat]:
    """Sum :func:`iteration_table` rows per rank."""
    per: dict[int, list[int]] = {}
    for r in rows:
        a = per.setdefault(r.rank, [0, 0, 0, 0, 0, 0])
        a[0] += 1
        a[1] += r.dur_ns
        a[2] += r.exposed_compute_ns
        a[3] += r.overlapped_ns
        a[4] += r.exposed_comm_ns
        a[5] += r.other_ns
    return [RankBreakdownStat(rk, a[0], a[1] / a[0], a[2], a[3], a[4], a[5]) for rk, a in sorted(per.items())]


# ---------------------------------------------------------------- clocks


@dataclass(frozen=True)
class ClockStat:
    """The clock correction of one rank (see :mod:`lumos_core.trace.clocks`)."""

    rank: int
    applied_offset_ns: int  # already included in the rank's times
    estimated_offset_ns: int
    residual_ns: int
    anchors: int  # collective instances that backed the estimate
    reference: bool


def clock_table(job: Job) -> list[ClockStat]:
    align: dict[str, Any] = job.alignment or {}
    est = align.get("offsets_us") or {}
    res = align.get("residual_us") or {}
    anchors = align.get("anchors") or {}
    ref = align.get("reference_rank")
    return [
        ClockStat(
            rank=t.rank,
            applied_offset_ns=int(t.clock_offset_ns),
            estimated_offset_ns=round(float(est.get(t.rank, 0.0)) * 1000),
            residual_ns=round(float(res.get(t.rank, 0.0)) * 1000),
            anchors=int(anchors.get(t.rank, 0)),
            reference=t.rank == ref,
        )
        for t in job.ranks
    ]


# ---------------------------------------------------------------- export


def table_columns(rows: Sequence[Any], row_type: type | None = None) -> list[str]:
    """Column names of a table of dataclass rows (from ``row_type`` when the table is empty)."""
    cls = type(rows[0]) if rows else row_type
    if cls is None:
        return []
    return [f.name for f in fields(cls)]


def write_csv(rows: Sequence[Any], path: str | Path, row_type: type | None = None) -> None:
    """Write a table of dataclass rows as CSV (header = field names; NaN written as empty)."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(table_columns(rows, row_type))
        for r in rows:
            w.writerow("" if isinstance(v, float) and math.isnan(v) else v for v in astuple(r))
