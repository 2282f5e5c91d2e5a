"""Iteration windows and the paper's execution breakdown (exposed compute, overlapped, exposed
communication, other/idle), computed on interval unions.

With C the union of compute activities (every GPU activity that is not a collective: kernels,
memcpy, memset) on all streams, M the union of communication kernels, and I the iteration window:
overlapped = |C ∩ M|, exposed compute = |C \\ M|, exposed communication = |M \\ C|,
other = |I| − |C ∪ M|. A rank without GPU work (a CPU-only trace) uses its top-level CPU
operations as C and its collective operations as M.

Iteration time is the period between consecutive iteration starts (``ProfilerStep#N`` →
``ProfilerStep#N+1``); the last iteration runs from its start to the end of the last activity that
belongs to it (launched from inside it, or started after it began). Every iteration is listed and
compared (:func:`iteration_windows`); a run's iteration time and breakdown average its steady-state
iterations (:func:`steady_windows`: the last one, which ends differently, is left out when there
are several). This is the one definition replay, estimate and the summaries use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.replay.intervals import clip, total, union
from lumos_core.trace.model import CPU_WORK_KINDS, GPU_ACTIVITY_KINDS, RankTrace

ITERATION_DEFINITION = (
    "iteration time = time between consecutive ProfilerStep#N starts (CPU side); the last iteration "
    "ends with the last activity that belongs to it; breakdown on interval unions over all streams: "
    "exposed compute = compute not overlapped by communication, overlapped = both at once, exposed "
    "communication = communication not overlapped by compute, other = the rest of the window (idle); "
    "a run's iteration time and breakdown = the mean over its steady-state iterations (the last one is "
    "left out when there are several)"
)


@dataclass(frozen=True)
class Window:
    name: str
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Breakdown:
    exposed_compute_ns: int
    overlapped_ns: int
    exposed_comm_ns: int
    other_ns: int

    @property
    def total_ns(self) -> int:
        return self.exposed_compute_ns + self.overlapped_ns + self.exposed_comm_ns + self.other_ns

    def as_us(self) -> dict[str, float]:
        return {
            "exposed_compute_us": self.exposed_compute_ns / 1000,
            "overlapped_us": self.overlapped_ns / 1000,
            "exposed_comm_us": self.exposed_comm_ns / 1000,
            "other_us": self.other_ns / 1000,
        }


def kind_mask(kind: np.ndarray, kinds: tuple[int, ...]) -> np.ndarray:
    """``np.isin(kind, kinds)``; for the int8 kind column a table lookup (several times faster)."""
    k = np.asarray(kind)
    if k.dtype == np.int8:
        table = np.zeros(256, bool)
        table[[int(x) & 0xFF for x in kinds]] = True
        return table[k.view(np.uint8)]
    return np.isin(k, kinds)


def gpu_activity(rank: RankTrace) -> np.ndarray:
    """Per event: is it GPU work (kernel, memcpy, memset)?"""
    return kind_mask(rank.kind, GPU_ACTIVITY_KINDS)


def activity(rank: RankTrace, gpu: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, is_comm) of the work that the breakdown counts for this rank. ``gpu``: the
    rank's :func:`gpu_activity` when the caller has it already."""
    idx, comm = activity_events(rank, gpu)
    start = np.asarray(rank.start)[idx]
    return start, start + np.asarray(rank.dur)[idx], comm


def activity_events(rank: RankTrace, gpu: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(events, is_comm) that the breakdown counts: the rank's GPU work, or on a CPU-only trace its
    outermost CPU work and collectives. Depends on the event table only, not on the times, so a
    replayed rank (same events, new times) shares it with the measured one."""
    comm = np.zeros(len(rank), bool)
    comm[rank.collectives.event] = True
    act = gpu_activity(rank) if gpu is None else gpu
    if not act.any():  # CPU-only trace: outermost CPU work, collectives as communication
        act = outermost_cpu_work(rank) | comm
    idx = np.flatnonzero(act)
    return idx, comm[idx]


def outermost_cpu_work(rank: RankTrace) -> np.ndarray:
    """CPU operators and runtime calls not inside another one. Annotations (``ProfilerStep#N``,
    ``## forward ##``) are not work: operators under them still count."""
    work = kind_mask(rank.kind, CPU_WORK_KINDS)
    parent = rank.parent.astype(np.int64)
    has = parent >= 0
    p = np.maximum(parent, 0)
    inside = np.zeros(len(rank), bool)
    for _ in range(int(rank.depth.max(initial=0)) + 1):  # one level of nesting per pass
        nxt = has & (work[p] | inside[p])
        if np.array_equal(nxt, inside):
            break
        inside = nxt
    return work & ~inside


def breakdown(starts: np.ndarray, ends: np.ndarray, is_comm: np.ndarray, lo: int, hi: int) -> Breakdown:
    """The four-way breakdown of the window [lo, hi)."""
    cs, ce = clip(starts[~is_comm], ends[~is_comm], lo, hi)
    ms, me = clip(starts[is_comm], ends[is_comm], lo, hi)
    c = total(cs, ce)
    m = total(ms, me)
    both = total(np.concatenate([cs, ms]), np.concatenate([ce, me]))
    overlapped = c + m - both
    return Breakdown(
        exposed_compute_ns=c - overlapped,
        overlapped_ns=overlapped,
        exposed_comm_ns=m - overlapped,
        other_ns=max(0, (hi - lo) - both),
    )


@dataclass(frozen=True)
class ActivityUnions:
    """The interval unions a breakdown measures: compute, communication, and both together
    (disjoint, sorted [start, end) arrays)."""

    compute: tuple[np.ndarray, np.ndarray]
    comm: tuple[np.ndarray, np.ndarray]
    both: tuple[np.ndarray, np.ndarray]


def activity_unions(starts: np.ndarray, ends: np.ndarray, is_comm: np.ndarray) -> ActivityUnions:
    cs, ce = union(starts[~is_comm], ends[~is_comm])
    ms, me = union(starts[is_comm], ends[is_comm])
    return ActivityUnions((cs, ce), (ms, me), union(np.concatenate([cs, ms]), np.concatenate([ce, me])))


def breakdowns(
    starts: np.ndarray, ends: np.ndarray, is_comm: np.ndarray, windows: list[Window]
) -> list[Breakdown]:
    """:func:`breakdown` of each window, the interval unions built once for all of them (the length
    of a union inside a window is the same whether the intervals are clipped before or after)."""
    if not windows:
        return []
    return window_breakdowns(activity_unions(starts, ends, is_comm), windows)


def window_breakdowns(unions: ActivityUnions, windows: list[Window]) -> list[Breakdown]:
    """:func:`breakdown` of each window, from the rank's :func:`activity_unions`."""
    out = []
    for w in windows:
        lo, hi = w.start, w.end
        c = _length_within(*unions.compute, lo, hi)
        m = _length_within(*unions.comm, lo, hi)
        both = _length_within(*unions.both, lo, hi)
        overlapped = c + m - both
        out.append(
            Breakdown(
                exposed_compute_ns=c - overlapped,
                overlapped_ns=overlapped,
                exposed_comm_ns=m - overlapped,
                other_ns=max(0, (hi - lo) - both),
            )
        )
    return out


def window_length(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """Length of the disjoint sorted intervals [s, e) inside [lo, hi)."""
    return _length_within(s, e, lo, hi)


def _length_within(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """Length of the disjoint sorted intervals [s, e) inside [lo, hi)."""
    a = int(np.searchsorted(e, lo, side="right"))  # the first interval ending after lo
    b = int(np.searchsorted(s, hi, side="left"))  # past the last one starting before hi
    if b <= a:
        return 0
    cs = np.maximum(s[a:b], lo)
    ce = np.minimum(e[a:b], hi)
    return int(np.maximum(ce - cs, 0).sum())


def iteration_windows(rank: RankTrace, gpu: np.ndarray | None = None) -> list[Window]:
    """Windows of the rank's iterations (see the module docstring); one "whole trace" window if none.
    ``gpu``: the rank's :func:`gpu_activity` when the caller has it already."""
    if len(rank) == 0:
        return []
    its = rank.iterations
    if not its:
        lo, hi = rank.span
        return [Window("whole trace", lo, hi)]
    out = [Window(a.name, a.cpu_start, b.cpu_start) for a, b in zip(its, its[1:])]
    last = its[-1]
    out.append(Window(last.name, last.cpu_start, last_activity_end(rank, last.cpu_start, last.cpu_end, gpu)))
    return out


def steady_windows(rank: RankTrace) -> list[Window]:
    """The windows a run's iteration time is averaged over: all but the last when there are several
    (the last ends with its own activity, not at a next step's start)."""
    windows = iteration_windows(rank)
    return windows[:-1] if len(windows) > 1 else windows


def last_activity_end(
    rank: RankTrace, step_start: int, step_cpu_end: int, gpu: np.ndarray | None = None
) -> int:
    """End of the last activity belonging to the step that starts at ``step_start``: GPU work launched
    from inside the step's CPU range, or (unlinked) started after the step began."""
    end = step_cpu_end
    act = np.flatnonzero(gpu_activity(rank) if gpu is None else gpu)
    if len(act):
        start = np.asarray(rank.start)
        launch = np.asarray(rank.launch)[act]
        own = start[act]
        mine = np.where(launch >= 0, start[np.maximum(launch, 0)] >= step_start, own >= step_start)
        if mine.any():
            end = max(end, int((own[mine] + np.asarray(rank.dur)[act][mine]).max()))
    return end


def rank_breakdowns(rank: RankTrace) -> list[tuple[Window, Breakdown]]:
    gpu = gpu_activity(rank)
    windows = iteration_windows(rank, gpu)
    return list(zip(windows, breakdowns(*activity(rank, gpu), windows)))
