"""Where GPU time goes: every idle gap of every GPU stream, split by what it waited for.

On the measured timeline, a stream is idle between the end of its work so far and the start of its
next activity. The graph says why that activity could not start earlier: its binding dependency
(the one whose measured time plus calibrated lag is latest) explains the gap up to that bound, and
whatever remains is delay no dependency explains. Causes:

``host``         waiting for the CPU to launch it: the launch was the binding dependency and the
                 launch call began after the stream went idle (the launch latency included)
``sync``         the part of a launch wait during which the launching thread was blocked in a
                 synchronize or blocking copy (the CPU was waiting for the GPU, so the GPU idled)
``event``        waiting for another stream (cudaStreamWaitEvent, or a CUDA graph's own order)
``peer``         waiting for another stream's collective that itself waited for peer ranks
``unexplained``  later than every dependency allows: another process on the GPU, throttling,
                 profiler flushes
``queued``       the activity was already launched when the stream went idle (the GPU runs behind
                 the CPU): the stream's own gap between queued work (stream order, launch latency),
                 never host
``before_window`` an activity launched before the trace window began: its launch and whatever it
                 waited for are not in the trace, so its gap is not the host's (nor unexplained)
``peer_not_loaded`` waiting for peer ranks that are not loaded: a collective whose peers are not in
                 the folder (its unexplained start delay), or an event wait on such a collective
                 (up to that collective's estimated wait, its duration over the fastest same kernel)

``CAUSE_INFO`` lists them in reading order with a human label and tip each (what presenters show).

The causes of a stream's iteration add up to its measured idle time (window minus the union of its
activities). Unexplained delays are also listed one by one, with whether they recur periodically.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.replay.breakdown import iteration_windows


@dataclass(frozen=True)
class Cause:
    """One cause of GPU idle time, as a reader sees it (the app's Idle pane makes a column of each)."""

    name: str  # key of IdleRow.causes, and of ``<name>_us`` in the JSON
    label: str  # short human heading
    tip: str  # one sentence: what the stream waited for


# Every cause the attribution reports, in reading order (the CPU's side, the GPU's own queue, other
# streams and ranks, the trace's edge, the rest). Presenters iterate this: a new cause added here
# gets its column without editing them.
CAUSE_INFO: tuple[Cause, ...] = (
    Cause(
        "host", "waiting for host launch", "the CPU had not launched the work yet (launch latency included)"
    ),
    Cause(
        "sync",
        "host blocked in sync",
        "part of a launch wait: the launching thread was blocked in a synchronize or blocking copy "
        "(the CPU waited for the GPU)",
    ),
    Cause(
        "queued",
        "GPU behind host (queued)",
        "the work was already launched when the stream went idle: the GPU runs behind the CPU, "
        "the gap is the stream's own (stream order, launch latency), not the host's",
    ),
    Cause(
        "event", "other stream (event)", "waiting for another stream (cudaStreamWaitEvent, CUDA graph order)"
    ),
    Cause("peer", "peer rank", "waiting for a collective that itself waited for peer ranks"),
    Cause(
        "peer_not_loaded",
        "peer rank not loaded",
        "waiting for peer ranks whose traces are not in the folder (a collective's start delay, "
        "or an event wait on such a collective)",
    ),
    Cause(
        "before_window",
        "before trace window",
        "the work was launched before the trace window began: its launch and what it waited for "
        "are not in the trace",
    ),
    Cause(
        "unexplained",
        "unexplained",
        "later than every dependency allows: another process on the GPU, throttling, profiler flushes",
    ),
)
CAUSES = tuple(c.name for c in CAUSE_INFO)
_EXPLAINED_NS = 1_000  # a bound this close to the start explains it (timestamps are µs-rounded)


@dataclass
class Delay:
    rank: int
    stream: int
    start: int  # ns, job time
    length: int  # ns
    task: str  # the activity that started late
    event: int = -1  # its event index in the rank's table

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "stream": self.stream,
            "start_us": self.start / 1000,
            "us": self.length / 1000,
            "task": self.task,
        }


@dataclass
class IdleRow:
    rank: int
    stream: int
    iteration: str
    window_ns: int
    idle_ns: int  # measured: window minus the union of the stream's activities
    causes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rank": self.rank, "stream": self.stream, "iteration": self.iteration}
        d.update({f"{c}_us": self.causes[c] / 1000 for c in CAUSES})
        d["idle_us"] = self.idle_ns / 1000
        d["window_us"] = self.window_ns / 1000
        return d


@dataclass
class IdleReport:
    rows: list[IdleRow]
    delays: list[Delay]  # unexplained delays, largest first

    def unexplained_summary(self, min_ns: int = 10_000) -> dict[str, Any]:
        """Count and largest unexplained delay, and whether the ones of at least ``min_ns`` recur
        with a regular period (per rank: the intervals between them vary by under 10 %)."""
        periodic = []
        by_rank: dict[int, list[int]] = {}
        for d in self.delays:
            if d.length >= min_ns:
                by_rank.setdefault(d.rank, []).append(d.start)
        for r, starts in sorted(by_rank.items()):
            s = np.unique(np.asarray(starts, np.int64))
            if len(s) >= 4:
                gaps = np.diff(s)
                mean = float(gaps.mean())
                if mean > 0 and float(gaps.std()) < 0.1 * mean:
                    periodic.append({"rank": r, "period_us": round(mean / 1000, 1), "count": len(s)})
        largest = max(self.delays, key=lambda d: d.length, default=None)
        return {
            "count": len(self.delays),
            "total_us": sum(d.length for d in self.delays) / 1000,
            "largest": largest.as_dict() if largest else None,
            "periodic": periodic,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "idle": [r.as_dict() for r in self.rows],
            "unexplained": self.unexplained_summary(),
            "top_unexplained": [d.as_dict() for d in self.delays[:20]],
        }


def idle_attribution(graph: ExecutionGraph) -> IdleReport:
    """Idle time per GPU stream and iteration, by cause (see the module docstring)."""
    from lumos_core.replay.peer_waits import unloaded_peer_nodes, wait_estimate

    ms, me = graph.measured_start, graph.measured_end
    cause, explained_until, binding_src = _binding(graph)
    blocked = _blocked_intervals(graph)
    join_wait = _peer_wait(graph)
    unloaded = unloaded_peer_nodes(graph)
    join_wait = np.where(unloaded, -wait_estimate(graph, unloaded), join_wait)  # < 0: peers not loaded
    rows: list[IdleRow] = []
    delays: list[Delay] = []
    stream_task = (graph.arrive_of < 0) & np.isin(graph.node_type, [NodeType.GPU, NodeType.ARRIVE])
    xfer_of = np.full(graph.n_nodes, -1, np.int64)
    xfer = np.flatnonzero(graph.arrive_of >= 0)
    xfer_of[graph.arrive_of[xfer]] = xfer
    for t in graph.job.ranks:
        windows = iteration_windows(t)
        if not windows:
            continue
        lo, hi = windows[0].start, windows[-1].end
        for p in sorted({int(x) for x in graph.proc[stream_task & (graph.rank == t.rank)]}):
            lane = graph.procs[p][1]
            if not t.lanes[lane].is_gpu:
                continue
            nodes = np.flatnonzero(stream_task & (graph.proc == p))
            starts = ms[nodes]
            ends = np.where(xfer_of[nodes] >= 0, me[np.maximum(xfer_of[nodes], 0)], me[nodes])
            order = np.argsort(starts, kind="stable")
            nodes, starts, ends = nodes[order], starts[order], ends[order]
            reach = np.maximum.accumulate(ends)
            gap_lo = np.r_[lo, reach[:-1]]  # the stream's work so far ended here
            parts = _split_gaps(
                graph, nodes, gap_lo, starts, cause, explained_until, binding_src, blocked, join_wait, unloaded
            )
            stream = t.lanes[lane].stream
            tail_lo = int(reach[-1]) if len(reach) else lo  # after the last activity: nothing launched
            for w in windows:
                row = IdleRow(t.rank, stream, w.name, w.length, 0)
                for c, a, b, _v in parts:
                    _add_clipped(row, c, a, b, w.start, w.end)
                _add_clipped(row, "host", tail_lo, hi, w.start, w.end)
                row.idle_ns = sum(row.causes.values())
                rows.append(row)
            for c, a, b, v in parts:
                if c == "unexplained" and a < hi and b > lo:
                    ev = int(graph.event[v])
                    delays.append(Delay(t.rank, stream, a, b - a, t.name_of(ev), ev))
    delays.sort(key=lambda d: -d.length)
    return IdleReport(rows, delays)


def _add_clipped(row: IdleRow, cause: str, a: int, b: int, lo: int, hi: int) -> None:
    a, b = max(a, lo), min(b, hi)
    if b > a:
        row.causes[cause] += b - a


def _split_gaps(graph, nodes, gap_lo, starts, cause, explained_until, binding_src, blocked, join_wait, unloaded):  # type: ignore[no-untyped-def]
    """Segments (cause, from, to, activity) of the gap before each activity: the explained part up
    to its binding bound (split into sync/host, or peer/event), then the unexplained rest."""
    out: list[tuple[str, int, int, int]] = []
    ms = graph.measured_start
    for v, a, s in zip(nodes.tolist(), gap_lo.tolist(), starts.tolist()):
        if s <= a:
            continue
        until = min(max(int(explained_until[v]), a), s)
        if s - until <= _EXPLAINED_NS:
            until = s
        c = cause[v]
        src = int(binding_src[v])
        if c == "host" and src >= 0 and ms[src] <= a:
            c = "queued"  # launched before the stream went idle: the GPU was behind, not the CPU
        first, first_len = c, 0
        if c == "host" and src >= 0:  # part of a launch wait can be the CPU blocked in a sync
            iv = blocked.get(int(graph.proc[src]))
            if iv is not None:
                first, first_len = "sync", _overlap(iv, a, until)
        elif c == "event" and src >= 0 and join_wait[src] > 0:
            first, first_len = "peer", min(int(join_wait[src]), until - a)
        elif c == "event" and src >= 0 and join_wait[src] < 0:
            first, first_len = "peer_not_loaded", min(-int(join_wait[src]), until - a)
        if first_len:
            out.append((first, a, a + first_len, v))
        if until > a + first_len:
            out.append((c, a + first_len, until, v))
        if s > until:
            rest = "unexplained"
            if c == "before_window":
                rest = "before_window"  # what it waited for is not in the trace
            elif unloaded[v]:
                rest = "peer_not_loaded"
            out.append((rest, until, s, v))
    return out


def _overlap(iv: tuple[np.ndarray, np.ndarray], a: int, b: int) -> int:
    """Length of [a, b) covered by the sorted disjoint intervals ``iv``."""
    s, e = iv
    i = int(np.searchsorted(e, a, side="right"))
    j = int(np.searchsorted(s, b, side="left"))
    if j <= i:
        return 0
    return int(np.sum(np.minimum(e[i:j], b) - np.maximum(s[i:j], a)))


def _binding(graph: ExecutionGraph) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per node, on measured times: the cause its binding start dependency stands for, the time
    that dependency allowed, and its source node (-1: nothing in the trace precedes it)."""
    n = graph.n_nodes
    src = graph.sp_src.astype(np.int64)
    dst = graph.sp_dst
    ref = np.where(graph.sp_from_end, graph.measured_end[src], graph.measured_start[src])
    bound = ref + graph.sp_lag
    order = np.lexsort((bound, dst))
    last = np.r_[dst[order][1:] != dst[order][:-1], True][: len(order)]
    best = order[last]
    until = np.full(n, np.iinfo(np.int64).min, np.int64)
    until[dst[best]] = bound[best]
    binding_src = np.full(n, -1, np.int64)
    binding_src[dst[best]] = src[best]
    kind = np.full(n, -1, np.int64)
    kind[dst[best]] = graph.sp_kind[best]
    # GPU work with no launch in the trace (launched before the window) is anchored at its measured
    # start: when the anchor binds, what it waited for is outside the trace.
    has_anchor = graph.anchor > np.iinfo(np.int64).min // 4
    launched = np.zeros(n, bool)
    launched[dst[graph.sp_kind == EdgeKind.LAUNCH]] = True
    gpu = np.isin(graph.node_type, [NodeType.GPU, NodeType.ARRIVE])
    early = gpu & ~launched & has_anchor & (graph.anchor >= until)
    until = np.where(has_anchor, np.maximum(until, graph.anchor), until)
    names = {
        int(EdgeKind.EVENT_WAIT): "event",
        int(EdgeKind.GRAPH): "event",
        int(EdgeKind.COLLECTIVE): "peer",
        int(EdgeKind.P2P): "peer",
        int(EdgeKind.STREAM): "queued",  # its stream predecessor bound it: the work was queued
    }
    cause = [names.get(int(k), "host") for k in kind.tolist()]
    for v in np.flatnonzero(early).tolist():
        cause[v] = "before_window"
        binding_src[v] = -1
    return cause, until, binding_src


def _blocked_intervals(graph: ExecutionGraph) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per CPU processor: the (merged) intervals its blocking calls spent waiting for the GPU."""
    from lumos_core.replay.intervals import union

    waits = np.flatnonzero(np.diff(graph.ep_ptr) > 0)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for p in np.unique(graph.proc[waits]).tolist():
        mine = waits[graph.proc[waits] == p]
        out[int(p)] = union(graph.measured_start[mine], graph.measured_end[mine])
    return out


def _peer_wait(graph: ExecutionGraph) -> np.ndarray:
    """Per collective transfer node: how long its rank waited for the last peer (join minus its own
    arrival), 0 elsewhere."""
    out = np.zeros(graph.n_nodes, np.int64)
    dst = graph.sp_dst
    sel = (graph.node_type[graph.sp_src] == NodeType.JOIN) & (graph.arrive_of[dst] >= 0)
    x = dst[sel]
    j = graph.sp_src[sel]
    out[x] = np.maximum(graph.measured_start[j] - graph.measured_start[graph.arrive_of[x]], 0)
    return out


def stalls_note(kept: bool, unexplained_ns: int) -> str | None:
    """Whether a replay or what-if kept the GPU delays no dependency explains; None when there are
    none worth a line (under 0.05 ms: "0.0 ms ... not replayed" only puzzles a reader)."""
    if unexplained_ns < 50_000:
        return None
    if kept:
        return f"stalls kept: {unexplained_ns / 1e6:.1f} ms of unexplained GPU delay replayed as fixed waits"
    return (
        f"stalls not kept: {unexplained_ns / 1e6:.1f} ms of unexplained GPU delay in the trace is not "
        "replayed (--keep-stalls keeps it)"
    )
