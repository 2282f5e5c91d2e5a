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

from lumos_core.replay.intervals import clip, total
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


def activity(rank: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, is_comm) of the work that the breakdown counts for this rank."""
    comm = np.zeros(len(rank), bool)
    comm[rank.collectives.event] = True
    act = np.isin(rank.kind, GPU_ACTIVITY_KINDS)
    if not act.any():  # CPU-only trace: outermost CPU work, collectives as communication
        act = outermost_cpu_work(rank) | comm
    idx = np.flatnonzero(act)
    return rank.start[idx], rank.start[idx] + rank.dur[idx], comm[idx]


def outermost_cpu_work(rank: RankTrace) -> np.ndarray:
    """CPU operators and runtime calls not inside another one. Annotations (``ProfilerStep#N``,
    ``## forward ##``) are not work: operators under them still count."""
    work = np.isin(rank.kind, CPU_WORK_KINDS)
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


def iteration_windows(rank: RankTrace) -> list[Window]:
    """Windows of the rank's iterations (see the module docstring); one "whole trace" window if none."""
    if len(rank) == 0:
        return []
    its = rank.iterations
    if not its:
        lo, hi = rank.span
        return [Window("whole trace", lo, hi)]
    out = [Window(a.name, a.cpu_start, b.cpu_start) for a, b in zip(its, its[1:])]
    last = its[-1]
    out.append(Window(last.name, last.cpu_start, last_activity_end(rank, last.cpu_start, last.cpu_end)))
    return out


def steady_windows(rank: RankTrace) -> list[Window]:
    """The windows a run's iteration time is averaged over: all but the last when there are several
    (the last ends with its own activity, not at a next step's start)."""
    windows = iteration_windows(rank)
    return windows[:-1] if len(windows) > 1 else windows


def last_activity_end(rank: RankTrace, step_start: int, step_cpu_end: int) -> int:
    """End of the last activity belonging to the step that starts at ``step_start``: GPU work launched
    from inside the step's CPU range, or (unlinked) started after the step began."""
    end = step_cpu_end
    act = np.isin(rank.kind, GPU_ACTIVITY_KINDS)
    if act.any():
        launch = rank.launch
        launched = np.zeros(len(rank), bool)
        has = act & (launch >= 0)
        launched[has] = rank.start[launch[has]] >= step_start
        unlinked = act & (launch < 0) & (rank.start >= step_start)
        mine = launched | unlinked
        if mine.any():
            end = max(end, int((rank.start[mine] + rank.dur[mine]).max()))
    return end


def rank_breakdowns(rank: RankTrace) -> list[tuple[Window, Breakdown]]:
    starts, ends, comm = activity(rank)
    return [(w, breakdown(starts, ends, comm, w.start, w.end)) for w in iteration_windows(rank)]
