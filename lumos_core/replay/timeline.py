"""The replayed timeline of a rank: its events with the times the replay gave them.

Tasks (graph nodes) take their node's replayed times. The other events of a lane (operators around
their kernels' launches, annotations, sync markers) move with the tasks around them: each start or
end is mapped into the gap between the lane's tasks it fell in (:func:`_map_into_gaps`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos_core.graph.model import ExecutionGraph
from lumos_core.replay.kernels import place_in_gap
from lumos_core.trace.model import RankTrace
from lumos_core.trace.rank_analysis import find_iterations


def predicted_rank(graph: ExecutionGraph, t: RankTrace, start: np.ndarray, end: np.ndarray) -> RankTrace:
    """The rank's events with replayed times. Tasks take their node's times; other events (parent
    operators, annotations, sync markers) move with the tasks around them on their lane."""
    node_of = graph.rank_nodes[t.rank]
    is_task = node_of >= 0
    ev = np.flatnonzero(is_task)
    nodes = node_of[ev]
    arrive = graph.arrive_of[nodes]
    disp_start_node = np.where(arrive >= 0, arrive, nodes)
    m_start = np.asarray(t.start)
    m_end = m_start + np.asarray(t.dur)
    new_start = m_start.copy()
    new_end = m_end.copy()
    new_start[ev] = start[disp_start_node]
    new_end[ev] = end[nodes]
    if len(ev) < len(t) and not _move_with_tasks(t, is_task, m_start, m_end, new_start, new_end):
        _move_with_tasks_by_lane(t, is_task, m_start, m_end, new_start, new_end)
    new_end -= new_start
    np.maximum(new_end, 0, out=new_end)
    p = dataclasses.replace(t, start=new_start, dur=new_end, warnings=[])
    p.iterations = find_iterations(p)
    return p


def _move_with_tasks(
    t: RankTrace,
    is_task: np.ndarray,
    m_start: np.ndarray,
    m_end: np.ndarray,
    new_start: np.ndarray,
    new_end: np.ndarray,
) -> bool:
    """Map every non-task event into the gaps between its lane's tasks (:func:`_map_into_gaps`), all
    lanes at once: each lane's times are shifted into a key range of its own, so one sorted array
    holds every lane's tasks and a search stays inside the lane. False (nothing done) where the
    keys would not fit in int64 or a lane is not sorted by start; the lane-by-lane loop then runs."""
    bounds = np.asarray(t.lane_begin, np.int64)
    n_lanes = len(bounds) - 1
    if n_lanes < 1 or bounds[0] != 0 or bounds[-1] != len(is_task):
        return False
    counts = np.diff(bounds)
    n_task = np.add.reduceat(is_task.astype(np.int64), bounds[:-1]) if len(is_task) else counts * 0
    n_task = np.where(counts > 0, n_task, 0)  # reduceat reads one element for an empty lane
    lanes = np.flatnonzero((n_task > 0) & (n_task < counts))  # lanes with tasks and other events
    if len(lanes) == 0:
        return True
    lo = [int(m_start[bounds[k] : bounds[k + 1]].min()) for k in lanes.tolist()]
    hi = [int(m_end[bounds[k] : bounds[k + 1]].max()) for k in lanes.tolist()]
    base = [0]
    for a, b in zip(lo, hi):
        base.append(base[-1] + (b - a) + 1)  # Python ints: no overflow in the check
    if base[-1] >= 2**62 or min(lo) <= -(2**62) or max(hi) >= 2**62:
        return False
    shift = np.asarray(base[:-1], np.int64) - np.asarray(lo, np.int64)  # key = time + shift[lane]
    lane_of = np.repeat(np.arange(n_lanes), counts)
    pos = np.full(n_lanes, -1, np.int64)
    pos[lanes] = np.arange(len(lanes))
    in_lanes = pos[lane_of] >= 0
    task_ev = np.flatnonzero(is_task & in_lanes)
    other_ev = np.flatnonzero(~is_task & in_lanes)
    task_shift = shift[pos[lane_of[task_ev]]]
    ms = m_start[task_ev]
    ms_key = ms + task_shift
    if len(ms_key) > 1 and not bool(np.all(ms_key[1:] >= ms_key[:-1])):
        return False
    me = m_end[task_ev]
    me_key = me + task_shift
    order_e = np.argsort(me_key, kind="stable")  # by measured end within each lane
    me_key_sorted = me_key[order_e]
    me_sorted = me[order_e]
    ne_sorted = new_end[task_ev][order_e]
    ns = new_start[task_ev]
    first = np.zeros(len(lanes) + 1, np.int64)
    np.cumsum(n_task[lanes], out=first[1:])
    other_pos = pos[lane_of[other_ev]]
    lo_i, hi_i = first[other_pos], first[other_pos + 1]
    other_shift = shift[other_pos]
    os_ = m_start[other_ev]
    oe = m_end[other_ev]
    s_new = _map_into_lane_gaps(
        os_, os_ + other_shift, lo_i, hi_i, ms_key, ms, ns, me_key_sorted, me_sorted, ne_sorted
    )
    e_new = _map_into_lane_gaps(
        oe, oe + other_shift, lo_i, hi_i, ms_key, ms, ns, me_key_sorted, me_sorted, ne_sorted
    )
    new_start[other_ev] = s_new
    new_end[other_ev] = np.maximum(e_new, s_new)
    return True


def _map_into_lane_gaps(
    x: np.ndarray,
    x_key: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    ms_key: np.ndarray,
    ms: np.ndarray,
    ns: np.ndarray,
    me_key_sorted: np.ndarray,
    me_sorted: np.ndarray,
    ne_sorted: np.ndarray,
) -> np.ndarray:
    """:func:`_map_into_gaps` for points of several lanes at once: lane tasks occupy [lo, hi) of the
    task arrays (searched by key), the arithmetic is on the times themselves."""
    nxt = np.searchsorted(ms_key, x_key, side="left")
    prv = np.searchsorted(me_key_sorted, x_key, side="right") - 1
    has_n = nxt < hi
    has_p = prv >= lo
    k = np.minimum(nxt, hi - 1)
    j = np.maximum(prv, lo)
    return place_in_gap(x, k, j, has_n, has_p, ms, ns, me_sorted, ne_sorted)


def _move_with_tasks_by_lane(
    t: RankTrace,
    is_task: np.ndarray,
    m_start: np.ndarray,
    m_end: np.ndarray,
    new_start: np.ndarray,
    new_end: np.ndarray,
) -> None:
    """:func:`_move_with_tasks` one lane at a time (any times, any order)."""
    for lane in range(len(t.lanes)):
        sl = t.lane_slice(lane)
        lane_ev = np.arange(sl.start, sl.stop)
        task_ev = lane_ev[is_task[sl]]
        other_ev = lane_ev[~is_task[sl]]
        if len(other_ev) == 0 or len(task_ev) == 0:
            continue
        ms = m_start[task_ev]
        me = m_end[task_ev]
        order_e = np.argsort(me, kind="stable")
        me_sorted = me[order_e]
        ne_sorted = new_end[task_ev][order_e]
        ns = new_start[task_ev]
        os_ = m_start[other_ev]
        oe = m_end[other_ev]
        s_new = _map_into_gaps(os_, ms, ns, me_sorted, ne_sorted)
        e_new = np.maximum(_map_into_gaps(oe, ms, ns, me_sorted, ne_sorted), s_new)
        new_start[other_ev] = s_new
        new_end[other_ev] = e_new


def _map_into_gaps(
    x: np.ndarray, ms: np.ndarray, ns: np.ndarray, me_sorted: np.ndarray, ne_sorted: np.ndarray
) -> np.ndarray:
    """New times of the points ``x`` of a lane that fall between its tasks (an operator's start or
    end around the tasks it contains). Each lies in the gap from the last task ended by then to the
    next task starting; the gap is stretched or shrunk like the replay did, and the point keeps its
    relative place in it. An operator that does its work after its last child (common on CPU)
    therefore keeps that work when the work is re-timed. ``ms``/``ns``: measured/new task starts
    (ascending); ``me_sorted``/``ne_sorted``: measured/new task ends, by measured end."""
    nxt = np.searchsorted(ms, x, side="left")  # first task starting at or after x
    prv = np.searchsorted(me_sorted, x, side="right") - 1  # last task ended by x
    has_n = nxt < len(ms)
    has_p = prv >= 0
    k = np.minimum(nxt, len(ms) - 1)
    j = np.maximum(prv, 0)
    return place_in_gap(x, k, j, has_n, has_p, ms, ns, me_sorted, ne_sorted)
