"""Where the operators and annotations around copied tasks go in a rebuilt timeline.

A rebuilt task has no measured time of its own, so a parent operator is placed from its copied
children: their predicted span, widened by the operator's own time before its first and after its
last task as traced (its lead and tail, from the source events). Two parents on one thread that
do not contain each other must not overlap, or the timeline would nest tasks under the wrong
operator: where the tail of the operators that end before a gap and the lead of those that start
after it do not both fit into the gap, the gap is shared between them in proportion.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lumos_core.graph.model import ExecutionGraph
from lumos_core.trace.model import RankTrace


@dataclass
class ParentCopy:
    """One copy of the source operator ``event`` of ``src`` around the task rows ``members``."""

    src: RankTrace
    event: int
    members: np.ndarray
    lane: int
    first_start: int  # the copied children's span
    last_end: int
    lead: int  # the operator's own time before its first and after its last task, as traced
    tail: int
    start: int = 0  # placed
    end: int = 0


def copies_of(
    members: list[int], row_start: np.ndarray, row_node: list[int], g: ExecutionGraph
) -> list[np.ndarray]:
    """Split the rows under one source operator into its copies: a rebuilt job repeats a traced
    operator (every iteration, microbatch or layer built from it), and each copy holds each of the
    source's tasks once, so a copy ends where a source task comes round again (in time order)."""
    m = np.asarray(members)
    m = m[np.argsort(row_start[m], kind="stable")]
    out: list[np.ndarray] = []
    seen: set[int] = set()
    begin = 0
    for i, row in enumerate(m.tolist()):
        node = row_node[row]
        src_event = int(g.event[node]) if node >= 0 else -1 - row
        if src_event in seen:
            out.append(m[begin:i])
            seen = set()
            begin = i
        seen.add(src_event)
    out.append(m[begin:])
    return out


def parent_copy(
    g: ExecutionGraph,
    src: RankTrace,
    p: int,
    m: np.ndarray,
    row_start: np.ndarray,
    row_end: np.ndarray,
    row_node: list[int],
    row_lane: list[int],
) -> ParentCopy:
    """The copy of operator ``p`` around task rows ``m``, with its traced lead and tail."""
    s_new = row_start[m]
    e_new = row_end[m]
    first, last = int(m[np.argmin(s_new)]), int(m[np.argmax(e_new)])
    e_first = int(g.event[row_node[first]]) if row_node[first] >= 0 else -1
    e_last = int(g.event[row_node[last]]) if row_node[last] >= 0 else -1
    lead = int(src.start[e_first]) - int(src.start[p]) if e_first >= 0 else 0
    tail = int(src.start[p] + src.dur[p]) - int(src.start[e_last] + src.dur[e_last]) if e_last >= 0 else 0
    return ParentCopy(
        src=src,
        event=p,
        members=m,
        lane=row_lane[first],
        first_start=int(s_new.min()),
        last_end=int(e_new.max()),
        lead=max(lead, 0),
        tail=max(tail, 0),
    )


def place(copies: list[ParentCopy], row_start: np.ndarray, row_end: np.ndarray, row_lane: np.ndarray) -> None:
    """Set every copy's start and end (see the module docstring)."""
    by_lane: dict[int, list[ParentCopy]] = defaultdict(list)
    for c in copies:
        by_lane[c.lane].append(c)
    for lane, cs in by_lane.items():
        rows = np.flatnonzero(row_lane == lane)
        order = rows[np.lexsort((row_end[rows], row_start[rows]))]
        starts = row_start[order]
        ends_before = np.maximum.accumulate(row_end[order])  # latest end among tasks up to here
        member_of = {}
        for k, c in enumerate(cs):
            for r in c.members.tolist():
                member_of.setdefault(r, set()).add(k)
        closing: dict[int, list[ParentCopy]] = defaultdict(list)  # gap index -> parents ending there
        opening: dict[int, list[ParentCopy]] = defaultdict(list)  # gap index -> parents starting there
        for k, c in enumerate(cs):
            c.start, c.end = c.first_start - c.lead, c.last_end + c.tail
            # gap i lies between the i-1-th and i-th task of the lane in time order
            i = int(np.searchsorted(starts, c.first_start, side="left"))
            opening[i].append(c)
            j = int(np.searchsorted(starts, c.last_end, side="left"))
            while j < len(order) and k in member_of.get(int(order[j]), ()):
                j += 1
            closing[j].append(c)
        for i in set(opening) | set(closing):
            lo = int(ends_before[i - 1]) if i > 0 else None  # the gap: [lo, hi]
            hi = int(starts[i]) if i < len(order) else None
            opens, closes = opening.get(i, []), closing.get(i, [])
            if lo is not None:
                for c in opens:
                    c.start = max(c.start, min(lo, c.first_start))
            if hi is not None:
                for c in closes:
                    c.end = min(c.end, max(hi, c.last_end))
            if not opens or not closes:
                continue
            latest_end = max(c.end for c in closes)
            earliest_start = min(c.start for c in opens)
            if latest_end <= earliest_start:
                continue
            gap_lo = max(c.last_end for c in closes)
            gap_hi = min(c.first_start for c in opens)
            tail = max(c.end - gap_lo for c in closes)
            lead = max(gap_hi - c.start for c in opens)
            cut = gap_lo + (gap_hi - gap_lo) * tail // max(tail + lead, 1)
            for c in closes:
                c.end = max(min(c.end, cut), c.last_end)
            for c in opens:
                c.start = min(max(c.start, cut), c.first_start)
