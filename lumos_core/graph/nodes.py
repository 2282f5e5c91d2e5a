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


def rank_nodes(t: RankTrace, base: int) -> RankNodes:
    has_child = np.zeros(len(t), bool)
    par = t.parent[t.parent >= 0]
    has_child[par] = True
    step_names = t.names_matching(lambda s: profiler_step(s) is not None)
    cpu_lane = np.asarray([not ln.is_gpu for ln in t.lanes], bool)
    cpu = np.isin(t.kind, CPU_TASK_KINDS) & ~has_child & cpu_lane[t.lane] & ~step_names[t.name]
    gpu = np.isin(t.kind, GPU_ACTIVITY_KINDS)
    task = cpu | gpu
    events = np.flatnonzero(task)
    node_of_event = np.full(len(t), -1, np.int64)
    node_of_event[events] = base + np.arange(len(events))
    # For events that are not tasks (a launch call with children, a parent op), the first task at or
    # after them on the same lane stands in as the source of their dependencies.
    first_after = np.full(len(t), -1, np.int64)
    for lane in range(len(t.lanes)):
        a, b = int(t.lane_begin[lane]), int(t.lane_begin[lane + 1])
        if b == a:
            continue
        ids = node_of_event[a:b]
        # reverse cumulative "next valid id"
        idx = np.where(ids >= 0, np.arange(b - a), b - a)
        nxt = np.minimum.accumulate(idx[::-1])[::-1]
        ok = nxt < b - a
        fa = np.full(b - a, -1, np.int64)
        fa[ok] = ids[nxt[ok]]
        first_after[a:b] = fa
    # An event's last task: the last task starting before the event ends, on its lane.
    last_within = np.full(len(t), -1, np.int64)
    for lane in range(len(t.lanes)):
        a, b = int(t.lane_begin[lane]), int(t.lane_begin[lane + 1])
        tasks = np.flatnonzero(node_of_event[a:b] >= 0)
        if len(tasks) == 0:
            continue
        task_starts = t.start[a:b][tasks]
        ends = t.start[a:b] + t.dur[a:b]
        k = np.searchsorted(task_starts, ends, side="left") - 1
        k = np.maximum(k, 0)
        cand = a + tasks[k]
        ok = cand >= np.arange(a, b)  # the task lies inside the event (or is the event)
        lw = np.where(ok, node_of_event[cand], -1)
        last_within[a:b] = lw
    return RankNodes(
        rank=t,
        base=base,
        events=events,
        is_gpu=gpu[events],
        node_of_event=node_of_event,
        first_leaf_after=first_after,
        last_leaf_within=last_within,
    )


def launches_by_stream(t: RankTrace, rn: RankNodes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GPU task nodes with their launch start time, launching lane and stream lane, in launch order."""
    gpu_nodes = np.flatnonzero(rn.is_gpu)
    ev = rn.events[gpu_nodes]
    launch = t.launch[ev]
    ok = launch >= 0
    order = np.argsort(t.start[launch[ok]], kind="stable")
    nodes = rn.base + gpu_nodes[ok][order]
    return nodes, t.start[launch[ok]][order], t.lane[launch[ok]][order], t.lane[ev[ok]][order]


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
