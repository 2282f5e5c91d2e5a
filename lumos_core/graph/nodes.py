"""Which events of a rank are tasks of the execution graph, and the per-rank lookups that the
dependency rules share (event -> task node, launches in issue order, previous activity on a stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.trace.kineto_schema import profiler_step
from lumos_core.trace.model import CPU_TASK_KINDS, GPU_ACTIVITY_KINDS, RankTrace

QUEUED_GAP_NS = 5_000  # a kernel starting this soon after its predecessor was queued behind it


@dataclass
class RankNodes:
    """Per-rank node bookkeeping while building."""

    rank: RankTrace
    base: int  # global id of the rank's first node
    events: np.ndarray  # event index per local node (task order = lane order)
    is_gpu: np.ndarray
    node_of_event: np.ndarray  # event -> global node id (-1 when the event is not a task)
    first_leaf_after: np.ndarray  # event -> global node id of the first task at/after it on its lane
    last_leaf_within: np.ndarray  # event -> global node id of its last task (itself if it is a task)
    launches: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # launches_by_stream


def rank_nodes(t: RankTrace, base: int, maps: bool = True) -> RankNodes:
    """The rank's task nodes, numbered from ``base``; ``maps``: with the leaf maps (else empty:
    :func:`leaf_maps` fills them when the rules need them)."""
    has_child = np.zeros(len(t), bool)
    par = t.parent[t.parent >= 0]
    has_child[par] = True
    step_names = t.names_matching(lambda s: profiler_step(s) is not None)
    cpu_lane = np.asarray([not ln.is_gpu for ln in t.lanes], bool)
    cpu = np.isin(t.kind, CPU_TASK_KINDS) & ~has_child & cpu_lane[t.lane] & ~step_names[t.name]
    gpu = np.isin(t.kind, GPU_ACTIVITY_KINDS)
    task = cpu | gpu
    events = np.flatnonzero(task)
    node_of_event = np.full(len(t), -1, np.int32)  # node ids fit in int32 (the graph stores them so)
    node_of_event[events] = base + np.arange(len(events))
    none = np.zeros(0, np.int32)
    first_after, last_within = leaf_maps(t, events, node_of_event) if maps else (none, none)
    return RankNodes(
        rank=t,
        base=base,
        events=events,
        is_gpu=gpu[events],
        node_of_event=node_of_event,
        first_leaf_after=first_after,
        last_leaf_within=last_within,
    )


def leaf_maps(t: RankTrace, events: np.ndarray, node_of_event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per event, on its own lane: the first task at or after it (for events that are not tasks, a
    launch call with children or a parent op, it stands in as the source of their dependencies),
    and its last task, the last task starting before the event ends (-1 where there is none).

    Whole-rank array passes: lanes are contiguous blocks sorted by start, so each lane's searches
    become one search over all tasks keyed by (lane, start)."""
    n = len(t)
    first_after = np.full(n, -1, np.int32)
    last_within = np.full(n, -1, np.int32)
    if n == 0 or len(events) == 0:
        return first_after, last_within
    lane_size = np.diff(t.lane_begin)
    lane_of = np.repeat(np.arange(len(lane_size)), lane_size)
    lane_end = t.lane_begin[1:][lane_of]
    # The next task at or after each event: a reverse running minimum of task positions, where a
    # non-task counts as its lane's end (every later lane's positions are at or past it).
    nxt = np.where(node_of_event >= 0, np.arange(n), lane_end)
    nxt = np.minimum.accumulate(nxt[::-1])[::-1]
    ok = nxt < lane_end
    first_after[ok] = node_of_event[nxt[ok]]
    # An event's last task: the last task of its lane starting before the event ends, or the lane's
    # first task (taken only when it lies inside the event or is the event).
    start, end = t.start, t.start + t.dur
    t0 = int(start.min())
    span = int(end.max()) - t0 + 1
    lane_tasks = np.searchsorted(events, t.lane_begin)  # tasks before each lane
    first_task = lane_tasks[:-1][lane_of]
    has_task = lane_tasks[1:][lane_of] > first_task
    if span * len(lane_size) < 2**62:
        task_key = lane_of[events] * span + (start[events] - t0)
        k = np.searchsorted(task_key, lane_of * span + (end - t0), side="left") - 1
    else:  # times too far apart to key by (lane, start): one search per lane
        k = np.empty(n, np.int64)
        for lane in range(len(lane_size)):
            a, b = int(t.lane_begin[lane]), int(t.lane_begin[lane + 1])
            lo, hi = int(lane_tasks[lane]), int(lane_tasks[lane + 1])
            k[a:b] = lo + np.searchsorted(start[events[lo:hi]], end[a:b], side="left") - 1
    cand = events[np.minimum(np.maximum(k, first_task), len(events) - 1)]
    ok = has_task & (cand >= np.arange(n))  # the task lies inside the event (or is the event)
    last_within[ok] = node_of_event[cand[ok]]
    return first_after, last_within


def launches_by_stream(t: RankTrace, rn: RankNodes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GPU task nodes with their launch start time, launching lane and stream lane, in launch order
    (worked out once per rank: several rules ask; the arrays are shared, never to be modified)."""
    if rn.launches is not None:
        return rn.launches
    gpu_nodes = np.flatnonzero(rn.is_gpu)
    ev = rn.events[gpu_nodes]
    launch = t.launch[ev]
    ok = launch >= 0
    order = np.argsort(t.start[launch[ok]], kind="stable")
    nodes = rn.base + gpu_nodes[ok][order]
    rn.launches = (nodes, t.start[launch[ok]][order], t.lane[launch[ok]][order], t.lane[ev[ok]][order])
    return rn.launches


# Kind (int8) -> is a GPU activity: a table look-up (indices of int8 values wrap like int8 does)
_IS_ACTIVITY = np.zeros(256, bool)
_IS_ACTIVITY[[int(k) for k in GPU_ACTIVITY_KINDS]] = True


def previous_end_on_stream(t: RankTrace, events: np.ndarray) -> np.ndarray:
    """Measured end of the activity before each of ``events`` on its stream (0 for the first)."""
    events = np.asarray(events, np.int64)
    act = np.flatnonzero(_IS_ACTIVITY[t.kind])  # grouped by lane, in time order
    pos = np.searchsorted(act, events) - 1  # the last activity before each event, on any lane
    prev = act[np.maximum(pos, 0)] if len(act) else np.zeros(len(events), np.int64)
    mine = (pos >= 0) & (prev >= t.lane_begin[t.lane[events]])  # ... on the event's own lane
    return np.where(mine, t.start[prev] + t.dur[prev], 0).astype(np.int64)
