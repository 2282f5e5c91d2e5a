"""The execution graph (paper §3.3): tasks on processors (CPU threads, GPU streams) and the
dependencies between them, built from a loaded :class:`~lumos_core.trace.model.Job`.

Tasks
    CPU tasks are the *leaf* CPU events of each thread (operators without children and runtime
    calls): their sequence is the thread's program order, and the time between them is CPU work,
    kept as measured. Parent operators and annotations are not tasks; the replay maps their times
    through the tasks they contain. GPU tasks are kernels, memcpy and memset on their stream.

Dependencies (:class:`EdgeKind`)
    ``CPU_THREAD``      consecutive tasks of a thread (lag = the measured CPU time between them)
    ``CPU_CROSS``       a thread resuming after another thread's work (e.g. the autograd thread
                        starting once the forward pass has called backward): a gap on one thread
                        that ends shortly after a task on another thread ended
    ``LAUNCH``          runtime call -> the GPU activity with its correlation id
    ``SYNC``            GPU -> CPU: a stream/device/event synchronize (or blocking copy) cannot
                        *end* before the GPU work it waits for has ended
    ``STREAM``          consecutive activities of a stream
    ``EVENT_WAIT``      cudaEventRecord on one stream -> cudaStreamWaitEvent on another (exact with
                        ``cuda_sync`` events, otherwise inferred from the launch order)
    ``COLLECTIVE``      every rank's kernel of a collective instance waits for all of them to arrive;
                        the transfer itself then takes the instance's measured transfer time
    ``P2P``             the same for send/recv pairs
    ``LAUNCH_QUEUE``    GPU -> CPU: a launch call cannot return while the device already holds its
                        limit of launched-but-not-started work (~1024 entries): when the GPU falls
                        behind, the CPU is throttled

Lags are calibrated so that replaying the unmodified graph reproduces the measured start of every
task: an edge that would force a task later than it was measured is tightened, and a delay no edge
explains (work outside the trace) is attached to the task's binding edge and counted
(``unexplained_ns``) so the quality of the graph is visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from lumos_core.errors import GraphError
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.collectives import CollectiveMatch
from lumos_core.trace.kineto_schema import (
    BLOCKING_COPY_CALLS,
    DEVICE_SYNC_CALLS,
    EVENT_RECORD_CALLS,
    EVENT_SYNC_CALLS,
    STREAM_SYNC_CALLS,
    STREAM_WAIT_CALLS,
    profiler_step,
)
from lumos_core.trace.model import CollectiveKind, Job, Kind, RankTrace

NO_ANCHOR = np.iinfo(np.int64).min // 4


class EdgeKind(IntEnum):
    CPU_THREAD = 0
    CPU_CROSS = 1
    LAUNCH = 2
    SYNC = 3
    STREAM = 4
    EVENT_WAIT = 5
    COLLECTIVE = 6
    P2P = 7
    LAUNCH_QUEUE = 8

    @property
    def label(self) -> str:
        return _EDGE_LABELS[self]


_EDGE_LABELS = {
    EdgeKind.CPU_THREAD: "CPU->CPU same thread",
    EdgeKind.CPU_CROSS: "CPU->CPU across threads",
    EdgeKind.LAUNCH: "CPU->GPU launch",
    EdgeKind.SYNC: "GPU->CPU sync",
    EdgeKind.STREAM: "GPU->GPU same stream",
    EdgeKind.EVENT_WAIT: "GPU->GPU across streams (event)",
    EdgeKind.COLLECTIVE: "rank<->rank collective",
    EdgeKind.P2P: "rank<->rank send/recv",
    EdgeKind.LAUNCH_QUEUE: "GPU->CPU launch queue full",
}


class NodeType(IntEnum):
    CPU = 0
    GPU = 1
    ARRIVE = 2  # a collective kernel's start on its stream (waits for its own dependencies)
    JOIN = 3  # a collective instance: starts when every participant has arrived


_ACTIVITY = np.asarray([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET], np.int8)
_CPU_TASK = np.asarray([Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.RUNTIME], np.int8)
_CROSS_THREAD_GAP_NS = 100_000  # a pause this long on a thread may be a wait for another thread
_QUEUED_GAP_NS = 5_000  # a kernel starting this soon after its predecessor was queued behind it
_BLOCKING_FLOOR_NS = 5_000  # what a synchronize costs when it does not have to wait
_LAUNCH_QUEUE_DEPTH = 1024  # CUDA's limit of launched work not yet started, per device


@dataclass
class ExecutionGraph:
    """Nodes and dependencies as columns. Node ids are global over the job.

    Start dependencies ``sp_*`` (CSR by destination): ``start[v] >= (end|start)[src] + lag``.
    End dependencies ``ep_*`` (CSR by destination): ``end[v] >= end[src] + lag`` (blocking calls).
    """

    job: Job
    rank: np.ndarray  # int32 rank number per node
    event: np.ndarray  # int32 event index in the rank's table (-1 for JOIN nodes)
    node_type: np.ndarray  # int8 NodeType
    proc: np.ndarray  # int32 processor (index into procs), -1 for JOIN
    dur: np.ndarray  # int64 ns
    anchor: np.ndarray  # int64 earliest start (the measured start of a task nothing precedes)
    measured_start: np.ndarray
    measured_end: np.ndarray
    sp_ptr: np.ndarray
    sp_src: np.ndarray
    sp_lag: np.ndarray
    sp_from_end: np.ndarray  # bool: depends on the source's end (else its start)
    sp_kind: np.ndarray  # int8 EdgeKind
    ep_ptr: np.ndarray
    ep_src: np.ndarray
    ep_lag: np.ndarray
    ep_from_end: np.ndarray  # bool: the source's end (else its start)
    ep_kind: np.ndarray
    order: np.ndarray  # a topological order of the nodes
    procs: list[tuple[int, int]]  # (rank, lane) per processor
    arrive_of: np.ndarray  # int32: for a collective's transfer node, its ARRIVE node, else -1
    rank_nodes: dict[int, np.ndarray] = field(default_factory=dict)  # rank -> task node per event (-1)
    unexplained_ns: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def n_nodes(self) -> int:
        return len(self.dur)

    @property
    def n_tasks(self) -> int:
        """CPU and GPU tasks (virtual collective nodes not counted)."""
        return int(np.count_nonzero(self.node_type <= NodeType.GPU))

    def edge_counts(self) -> dict[str, int]:
        """Dependencies per kind; a collective counts one edge per participating kernel."""
        counts = np.bincount(self.sp_kind, minlength=len(EdgeKind)) + np.bincount(
            self.ep_kind, minlength=len(EdgeKind)
        )
        from_join = self.node_type[self.sp_src] == NodeType.JOIN  # join -> transfer halves
        counts = counts - np.bincount(self.sp_kind[from_join], minlength=len(EdgeKind))
        return {k.name.lower(): int(counts[k]) for k in EdgeKind}

    @property
    def sp_dst(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_nodes, dtype=np.int32), np.diff(self.sp_ptr))

    @property
    def ep_dst(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_nodes, dtype=np.int32), np.diff(self.ep_ptr))


# ------------------------------------------------------------------------------------------ building


@dataclass
class _Edges:
    """Edge lists being collected before they become CSR arrays."""

    src: list[np.ndarray] = field(default_factory=list)
    dst: list[np.ndarray] = field(default_factory=list)
    lag: list[np.ndarray] = field(default_factory=list)
    from_end: list[np.ndarray] = field(default_factory=list)
    kind: list[np.ndarray] = field(default_factory=list)

    def add(self, src, dst, lag, from_end, kind: EdgeKind) -> None:  # type: ignore[no-untyped-def]
        src = np.asarray(src, np.int64).ravel()
        n = len(src)
        if n == 0:
            return
        self.src.append(src)
        self.dst.append(np.asarray(dst, np.int64).ravel())
        self.lag.append(np.broadcast_to(np.asarray(lag, np.int64), (n,)).copy())
        self.from_end.append(np.broadcast_to(np.asarray(from_end, bool), (n,)).copy())
        self.kind.append(np.full(n, int(kind), np.int8))

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.src:
            z = np.zeros(0, np.int64)
            return z, z, z, np.zeros(0, bool), np.zeros(0, np.int8)
        return (
            np.concatenate(self.src),
            np.concatenate(self.dst),
            np.concatenate(self.lag),
            np.concatenate(self.from_end),
            np.concatenate(self.kind),
        )


@dataclass
class _RankNodes:
    """Per-rank node bookkeeping while building."""

    rank: RankTrace
    base: int  # global id of the rank's first node
    events: np.ndarray  # event index per local node (task order = lane order)
    is_gpu: np.ndarray
    node_of_event: np.ndarray  # event -> global node id (-1 when the event is not a task)
    first_leaf_after: np.ndarray  # event -> global node id of the first task at/after it on its lane
    last_leaf_within: np.ndarray  # event -> global node id of its last task (itself if it is a task)


def build_graph(
    job: Job, *, progress: Progress = no_progress, calibrate: bool = True, absorb_unexplained: bool = False
) -> ExecutionGraph:
    """Build the execution graph of every rank of ``job`` and link the ranks through collectives."""
    if not job.ranks:
        raise GraphError("the job has no ranks")
    sp = _Edges()
    ep = _Edges()
    ranks: list[_RankNodes] = []
    node_rank, node_event, node_type, node_proc, node_dur, node_ms, node_me = [], [], [], [], [], [], []
    procs: list[tuple[int, int]] = []
    base = 0
    notes: list[str] = []
    latency = typical_launch_latency(job)
    for i, t in enumerate(job.ranks):
        progress(0.6 * i / len(job.ranks), f"graph of rank {t.rank}")
        rn = _rank_nodes(t, base)
        ranks.append(rn)
        n = len(rn.events)
        lane_of = t.lane[rn.events]
        proc_base = len(procs)
        lanes_used = np.unique(lane_of)
        procs.extend((t.rank, int(ln)) for ln in lanes_used)
        proc_index = np.full(len(t.lanes), -1, np.int64)
        proc_index[lanes_used] = proc_base + np.arange(len(lanes_used))
        node_rank.append(np.full(n, t.rank, np.int32))
        node_event.append(rn.events.astype(np.int32))
        node_type.append(np.where(rn.is_gpu, NodeType.GPU, NodeType.CPU).astype(np.int8))
        node_proc.append(proc_index[lane_of].astype(np.int32))
        node_dur.append(t.dur[rn.events].astype(np.int64))
        node_ms.append(t.start[rn.events].astype(np.int64))
        node_me.append((t.start + t.dur)[rn.events].astype(np.int64))
        _chain_edges(t, rn, sp)
        _launch_edges(t, rn, sp, latency)
        _cross_thread_edges(t, rn, sp)
        _sync_edges(t, rn, ep, notes)
        _launch_queue_edges(t, rn, ep)
        _event_wait_edges(t, rn, sp, notes, latency)
        base += n
    if base == 0:
        raise GraphError(f"{job.path}: no CPU or GPU work to replay (no tasks in any rank)")

    node = {
        "rank": np.concatenate(node_rank),
        "event": np.concatenate(node_event),
        "type": np.concatenate(node_type),
        "proc": np.concatenate(node_proc),
        "dur": np.concatenate(node_dur),
        "ms": np.concatenate(node_ms),
        "me": np.concatenate(node_me),
    }
    arrive_of = np.full(base, -1, np.int64)
    progress(0.65, "linking collectives across ranks")
    node, arrive_of = _collective_joins(job, ranks, node, arrive_of, sp, notes)

    s_src, s_dst, s_lag, s_end, s_kind = sp.arrays()
    e_src, e_dst, e_lag, e_end, e_kind = ep.arrays()
    # A thread that resumed because another thread's work ended was blocked, not working: its pause
    # is explained by the cross-thread dependency, so its same-thread lag is no CPU time.
    waited = np.unique(s_dst[s_kind == EdgeKind.CPU_CROSS])
    s_lag = np.where((s_kind == EdgeKind.CPU_THREAD) & np.isin(s_dst, waited), 0, s_lag)
    n_nodes = len(node["dur"])
    anchor = np.full(n_nodes, NO_ANCHOR, np.int64)
    has_pred = np.zeros(n_nodes, bool)
    has_pred[s_dst] = True
    anchor[~has_pred] = node["ms"][~has_pred]  # nothing precedes it: it starts when it was measured
    # GPU work launched before the profiling window waited on things the trace cannot show (its
    # launch, event waits); it starts when it was measured, or later if its stream makes it.
    launched = np.zeros(n_nodes, bool)
    launched[s_dst[s_kind == EdgeKind.LAUNCH]] = True
    early = ~launched & np.isin(node["type"], [NodeType.GPU, NodeType.ARRIVE]) & (arrive_of < 0)
    anchor[early] = node["ms"][early]

    progress(0.75, "calibrating dependency lags")
    unexplained = 0
    if calibrate:
        s_lag, unexplained = _calibrate_start_lags(
            node, s_src, s_dst, s_lag, s_end, anchor, absorb_unexplained
        )
        e_lag = _calibrate_end_lags(node, e_src, e_dst, e_lag, e_end)

    sp_ptr, (s_src, s_lag, s_end, s_kind) = _csr(n_nodes, s_dst, s_src, s_lag, s_end, s_kind)
    ep_ptr, (e_src, e_lag, e_end, e_kind) = _csr(n_nodes, e_dst, e_src, e_lag, e_end, e_kind)
    progress(0.85, "ordering tasks")
    try:
        order = _topological_order(node, sp_ptr, s_src, ep_ptr, e_src)
    except GraphError as exc:  # say which file and tasks: node ids mean nothing to a user
        raise GraphError(_cycle_message(job, node, exc)) from None

    rank_nodes = {}
    for rn in ranks:
        rank_nodes[rn.rank.rank] = rn.node_of_event
    graph = ExecutionGraph(
        job=job,
        rank=node["rank"],
        event=node["event"],
        node_type=node["type"],
        proc=node["proc"],
        dur=node["dur"],
        anchor=anchor,
        measured_start=node["ms"],
        measured_end=node["me"],
        sp_ptr=sp_ptr,
        sp_src=s_src.astype(np.int32),
        sp_lag=s_lag,
        sp_from_end=s_end,
        sp_kind=s_kind,
        ep_ptr=ep_ptr,
        ep_src=e_src.astype(np.int32),
        ep_lag=e_lag,
        ep_from_end=e_end,
        ep_kind=e_kind,
        order=order,
        procs=procs,
        arrive_of=arrive_of.astype(np.int32),
        rank_nodes=rank_nodes,
        unexplained_ns=unexplained,
        notes=_summarise_notes(notes),
    )
    progress(1.0, f"graph: {graph.n_tasks} tasks")
    return graph


def _summarise_notes(notes: list[str]) -> list[str]:
    """One line per kind of note for the whole job, not one per rank."""
    inferred = [n.split()[1:] for n in notes if n.startswith("inferred-waits ")]
    out = sorted({n for n in notes if not n.startswith("inferred-waits ")})
    if inferred:
        a = sum(int(x) for x, _ in inferred)
        b = sum(int(y) for _, y in inferred)
        out.append(
            f"{a} of {b} cross-stream event waits were inferred from launch order and timing "
            "(record them exactly with enable_cuda_sync_events=True)"
        )
    return out


def _rank_nodes(t: RankTrace, base: int) -> _RankNodes:
    has_child = np.zeros(len(t), bool)
    par = t.parent[t.parent >= 0]
    has_child[par] = True
    step_names = t.names_matching(lambda s: profiler_step(s) is not None)
    cpu_lane = np.asarray([not ln.is_gpu for ln in t.lanes], bool)
    cpu = np.isin(t.kind, _CPU_TASK) & ~has_child & cpu_lane[t.lane] & ~step_names[t.name]
    gpu = np.isin(t.kind, _ACTIVITY)
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
    return _RankNodes(
        rank=t,
        base=base,
        events=events,
        is_gpu=gpu[events],
        node_of_event=node_of_event,
        first_leaf_after=first_after,
        last_leaf_within=last_within,
    )


def _chain_edges(t: RankTrace, rn: _RankNodes, sp: _Edges) -> None:
    """Program order on threads and issue order on streams."""
    ev = rn.events
    lane = t.lane[ev]
    same = lane[1:] == lane[:-1]
    src = rn.base + np.flatnonzero(same)
    dst = src + 1
    prev_ev, next_ev = ev[:-1][same], ev[1:][same]
    prev_end = t.start[prev_ev] + t.dur[prev_ev]
    gap = t.start[next_ev] - prev_end
    gpu = rn.is_gpu[1:][same]
    # CPU: the time between two tasks of a thread is CPU work (kept). GPU: a stream that ran the next
    # kernel right after the previous one was queued (keep its small inter-kernel gap); a longer gap
    # means the kernel waited for something else (its launch, an event) - those edges explain it.
    overlap = gap < 0
    lag = np.where(gpu & (gap > _QUEUED_GAP_NS), 0, gap)
    # Overlapping kernels on one stream (programmatic dependent launch) are kept as measured: the
    # later one depends on the earlier one's start, not its end.
    from_end = ~(gpu & overlap)
    lag = np.where(gpu & overlap, t.start[next_ev] - t.start[prev_ev], lag)
    cpu_kind = ~gpu
    sp.add(src[cpu_kind], dst[cpu_kind], lag[cpu_kind], from_end[cpu_kind], EdgeKind.CPU_THREAD)
    sp.add(src[gpu], dst[gpu], lag[gpu], from_end[gpu], EdgeKind.STREAM)


def _launch_edges(t: RankTrace, rn: _RankNodes, sp: _Edges, typical: int) -> None:
    gpu_nodes = np.flatnonzero(rn.is_gpu)
    ev = rn.events[gpu_nodes]
    launch = t.launch[ev]
    ok = launch >= 0
    # The launch call is a task unless it has children (then its last task stands in for its end).
    src_end = rn.last_leaf_within[launch[ok]]
    good = src_end >= 0
    dst = rn.base + gpu_nodes[ok][good]
    src_end = src_end[good]
    # Launch latency, measured from the end of the launch call: a kernel is submitted when the call
    # returns (a call can take seconds when it loads a module lazily; the kernel waits for it).
    # Kernels that did not queue behind others show the latency itself; queued ones get the typical.
    launch_end = t.start[launch[ok][good]] + t.dur[launch[ok][good]]
    lat = t.start[ev[ok][good]] - launch_end
    lag = np.minimum(lat, typical)
    sp.add(src_end, dst, lag, True, EdgeKind.LAUNCH)


def _cross_thread_edges(t: RankTrace, rn: _RankNodes, sp: _Edges) -> None:
    """A thread that pauses and resumes right after another thread's task ended waited for it."""
    cpu_nodes = np.flatnonzero(~rn.is_gpu)
    if len(cpu_nodes) == 0:
        return
    ev = rn.events[cpu_nodes]
    lane = t.lane[ev]
    lanes = np.unique(lane)
    if len(lanes) < 2:
        return
    start = t.start[ev]
    end = start + t.dur[ev]
    first_of_lane = np.ones(len(ev), bool)
    first_of_lane[1:] = lane[1:] != lane[:-1]
    prev_end = np.r_[0, end[:-1]]
    gap = np.where(first_of_lane, np.iinfo(np.int64).max // 4, start - prev_end)
    cand = np.flatnonzero(gap > _CROSS_THREAD_GAP_NS)
    if len(cand) == 0:
        return
    best_end = np.full(len(cand), -1, np.int64)
    best_src = np.full(len(cand), -1, np.int64)
    for other in lanes:
        sel = np.flatnonzero(lane == other)
        order = np.argsort(end[sel], kind="stable")
        ends_sorted = end[sel][order]
        pos = np.searchsorted(ends_sorted, start[cand], side="right") - 1
        valid = (pos >= 0) & (lane[cand] != other)
        cand_end = np.where(valid, ends_sorted[np.maximum(pos, 0)], -1)
        lower = np.where(first_of_lane[cand], np.iinfo(np.int64).min, prev_end[cand])
        valid &= cand_end > lower  # it ended during the pause
        better = valid & (cand_end > best_end)
        best_end[better] = cand_end[better]
        best_src[better] = sel[order[np.maximum(pos, 0)]][better]
    found = best_src >= 0
    if not found.any():
        return
    dst_local = cand[found]
    src_local = best_src[found]
    sp.add(
        rn.base + cpu_nodes[src_local],
        rn.base + cpu_nodes[dst_local],
        start[dst_local] - end[src_local],
        True,
        EdgeKind.CPU_CROSS,
    )


def _launches_by_stream(
    t: RankTrace, rn: _RankNodes
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GPU task nodes with their launch start time, launching lane and stream lane, in launch order."""
    gpu_nodes = np.flatnonzero(rn.is_gpu)
    ev = rn.events[gpu_nodes]
    launch = t.launch[ev]
    ok = launch >= 0
    order = np.argsort(t.start[launch[ok]], kind="stable")
    nodes = rn.base + gpu_nodes[ok][order]
    return nodes, t.start[launch[ok]][order], t.lane[launch[ok]][order], t.lane[ev[ok]][order]


def _sync_edges(t: RankTrace, rn: _RankNodes, ep: _Edges, notes: list[str]) -> None:
    """GPU -> CPU: blocking calls end only after the GPU work they wait for."""
    names = t.strings
    stream_sync = t.names_matching(lambda s: s in STREAM_SYNC_CALLS)
    device_sync = t.names_matching(lambda s: s in DEVICE_SYNC_CALLS)
    event_sync = t.names_matching(lambda s: s in EVENT_SYNC_CALLS)
    record = t.names_matching(lambda s: s in EVENT_RECORD_CALLS)
    copy_sync = t.names_matching(lambda s: s in BLOCKING_COPY_CALLS)
    rt = t.kind == Kind.RUNTIME
    calls = np.flatnonzero(rt & (stream_sync | device_sync | event_sync | copy_sync)[t.name])
    if len(calls) == 0:
        return
    launch_nodes, launch_ts, launch_lane, stream_lane = _launches_by_stream(t, rn)
    sync_stream = _sync_event_streams(t)
    srcs: list[int] = []
    dsts: list[int] = []
    for call in calls.tolist():
        node = rn.node_of_event[call]
        if node < 0:
            continue
        name = names[int(t.name[call])]
        ts = int(t.start[call])
        before = int(np.searchsorted(launch_ts, ts, side="right"))  # launches issued before the call
        if before == 0:
            continue
        if name in BLOCKING_COPY_CALLS:
            targets = [int(n) for n in np.flatnonzero(t.launch[rn.events[np.flatnonzero(rn.is_gpu)]] == call)]
            srcs.extend(rn.base + np.flatnonzero(rn.is_gpu)[targets])
            dsts.extend([node] * len(targets))
            continue
        if name in DEVICE_SYNC_CALLS:
            wanted = np.unique(stream_lane[:before])
        elif name in STREAM_SYNC_CALLS:
            lane = sync_stream.get(int(t.correlation[call]))
            if lane is None:  # no cuda_sync event: the stream this thread launched on last
                mine = np.flatnonzero(launch_lane[:before] == t.lane[call])
                lane = int(stream_lane[mine[-1]]) if len(mine) else int(stream_lane[before - 1])
            wanted = np.asarray([lane])
        else:  # event synchronize: the stream of the most recent event record on this thread
            rec = _previous_on_lane(t, call, record)
            cut = before if rec < 0 else int(np.searchsorted(launch_ts, int(t.start[rec]), side="right"))
            if cut == 0:
                continue
            mine = np.flatnonzero(launch_lane[:cut] == t.lane[call])
            wanted = np.asarray([int(stream_lane[mine[-1]] if len(mine) else stream_lane[cut - 1])])
            before = cut
        for lane in wanted.tolist():
            on_lane = np.flatnonzero(stream_lane[:before] == lane)
            if len(on_lane):
                srcs.append(int(launch_nodes[on_lane[-1]]))
                dsts.append(node)
    ep.add(srcs, dsts, 0, True, EdgeKind.SYNC)


def _launch_queue_edges(t: RankTrace, rn: _RankNodes, ep: _Edges) -> None:
    """The i-th launch on a device cannot return before the (i - Q)-th launched activity started.

    Q is CUDA's pending-launch limit (about 1024); the trace itself shows it when the GPU fell far
    enough behind (pending work plateaus there), so Q is never below what was measured."""
    nodes, _launch_ts, _launch_lane, _stream_lane = _launches_by_stream(t, rn)
    if len(nodes) <= _LAUNCH_QUEUE_DEPTH:
        return
    ev = rn.events[nodes - rn.base]
    call = t.launch[ev]
    call_end = t.start[call] + t.dur[call]
    starts_sorted = np.sort(t.start[ev])
    pending = np.arange(1, len(ev) + 1) - np.searchsorted(starts_sorted, call_end, side="right")
    depth = max(_LAUNCH_QUEUE_DEPTH, int(pending.max()))
    if len(nodes) <= depth:
        return
    src = nodes[: len(nodes) - depth]
    dst_calls = rn.last_leaf_within[call[depth:]]
    ok = dst_calls >= 0
    ep.add(src[ok], dst_calls[ok], 0, False, EdgeKind.LAUNCH_QUEUE)


def _sync_event_streams(t: RankTrace) -> dict[int, int]:
    """correlation of a cudaStreamSynchronize -> its stream's lane, from ``cuda_sync`` events."""
    out: dict[int, int] = {}
    for i in np.flatnonzero(t.kind == Kind.CUDA_SYNC).tolist():
        args = t.args_of(i)
        if args.get("cuda_sync_kind") == "Stream Sync":
            out[int(t.correlation[i])] = int(t.lane[i])
    return out


def _previous_on_lane(t: RankTrace, event: int, name_mask: np.ndarray) -> int:
    sl = t.lane_slice(int(t.lane[event]))
    idx = np.flatnonzero(name_mask[t.name[sl.start : event]])
    return sl.start + int(idx[-1]) if len(idx) else -1


def _event_wait_edges(
    t: RankTrace, rn: _RankNodes, sp: _Edges, notes: list[str], typical_latency: int
) -> None:
    """cudaEventRecord on stream A, cudaStreamWaitEvent on stream B: B's next work waits for A's last.

    With ``cuda_sync`` events the pairing is exact. Without them (most traces) the waiting stream is
    the stream this thread launches on next, and the recorded work is found in one of two ways:
    when the record call sits right next to the wait (same operator: ProcessGroupNCCL before a
    collective) it is the last work launched on the most recently used other stream; when the record
    is not visible (recorded earlier, elsewhere: ``work.wait()`` on a collective's end event) and the
    waiting kernel started later than its launch and its stream explain, it is the work on another
    stream, launched before the wait, that ended last before that kernel started.
    """
    waits = np.flatnonzero(
        (t.kind == Kind.RUNTIME) & t.names_matching(lambda s: s in STREAM_WAIT_CALLS)[t.name]
    )
    if len(waits) == 0:
        return
    launch_nodes, launch_ts, launch_lane, stream_lane = _launches_by_stream(t, rn)
    if len(launch_nodes) == 0:
        return
    node_ev = rn.events[launch_nodes - rn.base]
    act_start = t.start[node_ev]
    act_end = act_start + t.dur[node_ev]
    launch_of = t.launch[node_ev]
    launch_end = t.start[launch_of] + t.dur[launch_of]
    prev_end_on_stream = _previous_end_on_stream(t, node_ev)
    record_mask = t.names_matching(lambda s: s in EVENT_RECORD_CALLS)
    exact = _stream_wait_sync_events(t)
    record_by_corr = {
        int(t.correlation[i]): i for i in np.flatnonzero(record_mask[t.name] & (t.kind == Kind.RUNTIME))
    }
    srcs: list[int] = []
    dsts: list[int] = []
    lags: list[int] = []
    inferred = 0
    for w in waits.tolist():
        ts = int(t.start[w])
        after = int(np.searchsorted(launch_ts, ts, side="right"))
        info = exact.get(int(t.correlation[w]))
        src_idx = -1
        if info is not None:
            dest_lane, src_lane, rec_corr = info
            if src_lane < 0:  # it waits on a stream that ran nothing in the trace: nothing to wait for
                continue
            rec = record_by_corr.get(rec_corr, -1)
            if rec >= 0 and int(t.start[rec]) > ts:
                rec = -1  # a wait cannot wait for a record issued after it (reused or corrupt id)
            cut = after if rec < 0 else int(np.searchsorted(launch_ts, int(t.start[rec]), side="right"))
            on_src = np.flatnonzero(stream_lane[:cut] == src_lane)
            if len(on_src):
                src_idx = int(on_src[-1])
            on_dst = np.flatnonzero(stream_lane[after:] == dest_lane)
            if len(on_dst) == 0:
                continue
            dst_idx = after + int(on_dst[0])
        else:
            inferred += 1
            mine_after = np.flatnonzero(launch_lane[after:] == t.lane[w])
            if len(mine_after) == 0:
                continue
            dst_idx = after + int(mine_after[0])
            dest_lane = int(stream_lane[dst_idx])
            rec = _adjacent_record(t, w, record_mask)
            if rec >= 0:
                cut = int(np.searchsorted(launch_ts, int(t.start[rec]), side="right"))
                others = np.flatnonzero(stream_lane[:cut] != dest_lane)
                if len(others):
                    src_lane = int(stream_lane[others[-1]])
                    src_idx = int(np.flatnonzero(stream_lane[:cut] == src_lane)[-1])
            explained = max(int(prev_end_on_stream[dst_idx]), int(launch_end[dst_idx]) + typical_latency)
            if int(act_start[dst_idx]) - explained > _QUEUED_GAP_NS:
                # The kernel waited for something: the other-stream work that ended just before it.
                cand = np.flatnonzero(
                    (stream_lane[:after] != dest_lane) & (act_end[:after] <= act_start[dst_idx] + 2_000)
                )
                if len(cand):
                    best = int(cand[np.argmax(act_end[cand])])
                    if src_idx < 0 or act_end[best] > act_end[src_idx]:
                        src_idx = best
        if src_idx < 0 or stream_lane[src_idx] == stream_lane[dst_idx]:
            continue
        srcs.append(int(launch_nodes[src_idx]))
        dsts.append(int(launch_nodes[dst_idx]))
        # The GPU takes a few µs to see an event complete: keep that latency when it was measured.
        lags.append(min(max(int(act_start[dst_idx] - act_end[src_idx]), 0), _QUEUED_GAP_NS))
    if inferred:
        notes.append(f"inferred-waits {inferred} {len(waits)}")
    sp.add(srcs, dsts, lags, True, EdgeKind.EVENT_WAIT)


def typical_launch_latency(job: Job) -> int:
    """Time from a launch call's end to its kernel's start when nothing else holds the kernel back.

    Measured over kernels that found their stream idle (queued kernels wait for their predecessor);
    some of those still wait for an event, so a low percentile, over all ranks, is the latency."""
    samples = []
    for t in job.ranks:
        act = np.flatnonzero(np.isin(t.kind, _ACTIVITY) & (t.launch >= 0))
        if len(act) == 0:
            continue
        launch = t.launch[act]
        lat = t.start[act] - (t.start[launch] + t.dur[launch])
        idle = t.start[act] - _previous_end_on_stream(t, act) > _QUEUED_GAP_NS
        samples.append(lat[idle & (lat >= 0)])
    sample = np.concatenate(samples) if samples else np.zeros(0, np.int64)
    return int(np.percentile(sample, 20)) if len(sample) else 2_000


def _previous_end_on_stream(t: RankTrace, events: np.ndarray) -> np.ndarray:
    """Measured end of the activity before each of ``events`` on its stream (0 for the first)."""
    out = np.zeros(len(events), np.int64)
    act = np.isin(t.kind, _ACTIVITY)
    for lane in np.unique(t.lane[events]).tolist():
        sl = t.lane_slice(lane)
        idx = np.arange(sl.start, sl.stop)[act[sl]]
        ends = t.start[idx] + t.dur[idx]
        pos = np.searchsorted(idx, events[t.lane[events] == lane])
        prev = np.where(pos > 0, ends[np.maximum(pos - 1, 0)], 0)
        out[t.lane[events] == lane] = prev
    return out


def _adjacent_record(t: RankTrace, wait: int, record_mask: np.ndarray) -> int:
    """The cudaEventRecord issued together with this wait (same operator, or just before it)."""
    sl = t.lane_slice(int(t.lane[wait]))
    lo = sl.start
    i = wait - 1
    ext = int(t.external_id[wait])
    while i >= lo and int(t.start[wait]) - int(t.start[i]) < 200_000:
        if t.kind[i] == Kind.RUNTIME:
            if record_mask[t.name[i]]:
                same_op = ext >= 0 and int(t.external_id[i]) == ext
                close = int(t.start[wait]) - int(t.start[i] + t.dur[i]) < 20_000
                return i if (same_op or close) else -1
            if t.names_matching is not None and t.strings[int(t.name[i])] in STREAM_WAIT_CALLS:
                return -1  # another wait in between: that record belonged to it
        i -= 1
    return -1


def _stream_wait_sync_events(t: RankTrace) -> dict[int, tuple[int, int, int]]:
    """correlation of cudaStreamWaitEvent -> (waiting lane, recorded lane, record correlation)."""
    out: dict[int, tuple[int, int, int]] = {}
    lane_of_stream = {(ln.device, ln.stream): ln.index for ln in t.lanes if ln.is_gpu}
    for i in np.flatnonzero(t.kind == Kind.CUDA_SYNC).tolist():
        a = t.args_of(i)
        if a.get("cuda_sync_kind") != "Stream Wait Event":
            continue
        dev = t.lanes[int(t.lane[i])].device
        src = lane_of_stream.get((dev, a.get("wait_on_stream")), -1)
        rec = a.get("wait_on_cuda_event_record_corr_id", -1)
        out[int(t.correlation[i])] = (int(t.lane[i]), src, int(rec) if isinstance(rec, int) else -1)
    return out


def _collective_joins(
    job: Job,
    ranks: list[_RankNodes],
    node: dict[str, np.ndarray],
    arrive_of: np.ndarray,
    sp: _Edges,
    notes: list[str],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Turn every complete collective instance into arrive -> join -> transfer.

    Each participant's kernel node becomes its ARRIVE node (it keeps the kernel's dependencies; its
    start is when this rank is ready). A JOIN node starts at the latest arrival. A new transfer node
    per participant starts at the join and lasts that rank's measured transfer time (its kernel end
    minus the instance's latest start), so waiting for peers is separated from moving data.
    """
    match: CollectiveMatch | None = job.collective_match
    if match is None or match.n_instances == 0:
        return node, arrive_of
    by_rank = {rn.rank.rank: rn for rn in ranks}
    part_inst, part_node, part_rank = [], [], []
    for r, inst in match.instance.items():
        rn = by_rank.get(r)
        if rn is None or len(inst) == 0:
            continue
        ok = inst >= 0
        ok[ok] = match.complete[inst[ok]] & (match.members[inst[ok]] >= 2)
        nodes = rn.node_of_event[rn.rank.collectives.event[ok]]
        good = nodes >= 0
        part_inst.append(inst[ok][good])
        part_node.append(nodes[good])
        part_rank.append(np.full(int(good.sum()), r))
    if not part_inst:
        return node, arrive_of
    inst = np.concatenate(part_inst)
    arrive = np.concatenate(part_node)
    if len(inst) == 0:
        return node, arrive_of
    uniq, k = np.unique(inst, return_inverse=True)
    n0 = len(node["dur"])
    n_join = len(uniq)
    n_part = len(arrive)
    join_ids = n0 + np.arange(n_join)
    xfer_ids = n0 + n_join + np.arange(n_part)
    ms = node["ms"]
    me = node["me"]
    latest_start = np.full(n_join, np.iinfo(np.int64).min)
    np.maximum.at(latest_start, k, ms[arrive])
    transfer = np.maximum(me[arrive] - latest_start[k], 0)
    # The transfer node takes over the kernel's place: its successors must follow the transfer.
    _redirect_sources(sp, arrive, xfer_ids)
    p2p = np.isin(match.kind[uniq], [CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV])
    kind_join = np.where(p2p[k], EdgeKind.P2P, EdgeKind.COLLECTIVE)
    for kd in (EdgeKind.COLLECTIVE, EdgeKind.P2P):
        sel = kind_join == kd
        sp.add(arrive[sel], join_ids[k[sel]], 0, True, kd)
        sp.add(join_ids[k[sel]], xfer_ids[sel], 0, False, kd)
    new = {
        "rank": np.concatenate([node["rank"], np.full(n_join, -1, np.int32), node["rank"][arrive]]),
        "event": np.concatenate([node["event"], np.full(n_join, -1, np.int32), node["event"][arrive]]),
        "type": np.concatenate(
            [node["type"], np.full(n_join, NodeType.JOIN, np.int8), np.full(n_part, NodeType.GPU, np.int8)]
        ),
        "proc": np.concatenate([node["proc"], np.full(n_join, -1, np.int32), node["proc"][arrive]]),
        "dur": np.concatenate([node["dur"], np.zeros(n_join, np.int64), transfer]),
        "ms": np.concatenate([ms, latest_start, latest_start[k]]),
        "me": np.concatenate([me, latest_start, me[arrive]]),
    }
    new["type"][arrive] = NodeType.ARRIVE
    new["dur"][arrive] = 0
    new["me"][arrive] = ms[arrive]
    arrive_all = np.concatenate([arrive_of, np.full(n_join, -1), arrive])
    for rn in ranks:  # the event's task node is now the transfer node
        m = np.asarray(new["rank"][xfer_ids]) == rn.rank.rank
        rn.node_of_event[new["event"][xfer_ids[m]]] = xfer_ids[m]
    return new, arrive_all


def _redirect_sources(sp: _Edges, old: np.ndarray, new: np.ndarray) -> None:
    """Edges leaving ``old[i]`` leave ``new[i]`` instead (except the arrive node's own inputs)."""
    remap = dict(zip(old.tolist(), new.tolist()))
    lookup_keys = np.asarray(sorted(remap), np.int64)
    lookup_vals = np.asarray([remap[x] for x in lookup_keys.tolist()], np.int64)
    for i, src in enumerate(sp.src):
        pos = np.searchsorted(lookup_keys, src)
        pos_c = np.minimum(pos, len(lookup_keys) - 1)
        hit = (pos < len(lookup_keys)) & (lookup_keys[pos_c] == src)
        if hit.any():
            s = src.copy()
            s[hit] = lookup_vals[pos_c[hit]]
            sp.src[i] = s


def _calibrate_start_lags(
    node: dict[str, np.ndarray],
    src: np.ndarray,
    dst: np.ndarray,
    lag: np.ndarray,
    from_end: np.ndarray,
    anchor: np.ndarray,
    absorb: bool,
) -> tuple[np.ndarray, int]:
    """Make every task's dependencies reproduce its measured start (see the module docstring)."""
    if len(src) == 0:
        return lag, 0
    t_src = np.where(from_end, node["me"][src], node["ms"][src])
    bound = t_src + lag
    target = node["ms"][dst]
    # Too tight: the task started earlier than this edge allows (clock fuzz, a wrong inference).
    lag = np.where(bound > target, lag - (bound - target), lag)
    bound = t_src + lag
    n = len(node["dur"])
    best = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(best, dst, bound)
    # Too loose: nothing explains the start; attach the delay to the binding edge (the latest bound).
    delay = np.where(best > np.iinfo(np.int64).min // 2, node["ms"] - best, 0)
    delay = np.maximum(delay, 0)
    delay[anchor != NO_ANCHOR] = 0
    is_best = bound == best[dst]
    first_best = np.zeros(len(src), bool)
    cand = np.flatnonzero(is_best)
    _, first = np.unique(dst[cand], return_index=True)
    first_best[cand[first]] = True
    if absorb:
        lag = lag + np.where(first_best, delay[dst], 0)
    gpu_like = node["type"] != NodeType.CPU
    return lag, int(delay[gpu_like].sum())


def _calibrate_end_lags(
    node: dict[str, np.ndarray], src: np.ndarray, dst: np.ndarray, lag: np.ndarray, from_end: np.ndarray
) -> np.ndarray:
    """A blocking call returns a few µs after what it waited for. For the dependency that was met
    last (the binding one) that is the measured return latency, and the call's own duration shrinks
    to a small floor, so it ends earlier when the GPU gets faster. Other dependencies, met before the
    call started, get the typical return latency, never more than measured."""
    if len(src) == 0:
        return lag
    me, ms = node["me"], node["ms"]
    t_src = np.where(from_end, me[src], ms[src])
    ret = me[dst] - t_src
    latest = np.full(len(node["dur"]), np.iinfo(np.int64).min)
    np.maximum.at(latest, dst, t_src)
    binding = t_src == latest[dst]
    blocked = binding & (t_src > ms[dst])  # not met when the call started: the call waited
    typical = int(np.median(ret[blocked])) if blocked.any() else 5_000
    typical = max(0, min(typical, 50_000))
    lag = np.where(blocked, ret, np.minimum(ret, typical))
    waited = np.unique(dst[blocked])
    node["dur"][waited] = np.minimum(node["dur"][waited], _BLOCKING_FLOOR_NS)
    return lag


def _csr(n: int, dst: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return ptr, tuple(c[order] for c in cols)


def _topological_order(
    node: dict[str, np.ndarray],
    sp_ptr: np.ndarray,
    sp_src: np.ndarray,
    ep_ptr: np.ndarray,
    ep_src: np.ndarray,
) -> np.ndarray:
    """Measured time is almost a topological order; verify it, and fall back to Kahn's algorithm."""
    n = len(node["dur"])
    key = node["ms"].astype(np.int64).copy()
    has_end_dep = np.diff(ep_ptr) > 0
    key[has_end_dep] = node["me"][has_end_dep]  # a blocking call is final when it ends
    typ = node["type"]
    # ties: arrivals before joins before transfers; otherwise by id (chain order)
    tie = np.where(typ == NodeType.JOIN, 1, np.where(typ == NodeType.ARRIVE, 0, 0))
    order = np.lexsort((np.arange(n), tie, key))
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    s_dst = np.repeat(np.arange(n), np.diff(sp_ptr))
    e_dst = np.repeat(np.arange(n), np.diff(ep_ptr))
    bad = np.count_nonzero(pos[sp_src] >= pos[s_dst]) + np.count_nonzero(pos[ep_src] >= pos[e_dst])
    if bad == 0:
        return order.astype(np.int32)
    return _kahn(n, np.concatenate([sp_src, ep_src]), np.concatenate([s_dst, e_dst]), key)


def _kahn(n: int, src: np.ndarray, dst: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Topological order preferring earlier measured times; raises GraphError on a cycle."""
    import heapq

    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    order_e = np.argsort(src, kind="stable")
    s_sorted, d_sorted = src[order_e], dst[order_e]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(s_sorted, minlength=n), out=ptr[1:])
    succ = d_sorted.tolist()
    ptr_l = ptr.tolist()
    key_l = key.tolist()
    deg = indeg.tolist()
    heap = [(key_l[v], v) for v in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for j in range(ptr_l[v], ptr_l[v + 1]):
            w = succ[j]
            deg[w] -= 1
            if deg[w] == 0:
                heapq.heappush(heap, (key_l[w], w))
    if len(out) < n:
        stuck = [v for v in range(n) if deg[v] > 0][:5]
        err = GraphError(
            f"the execution graph has a cycle ({n - len(out)} tasks can never start, e.g. nodes "
            f"{stuck}); a cudaStreamWaitEvent or sync was probably paired with the wrong work"
        )
        err.stuck = (n - len(out), stuck)  # type: ignore[attr-defined]
        raise err
    return np.asarray(out, np.int32)


def _cycle_message(job: Job, node: dict[str, np.ndarray], exc: GraphError) -> str:
    """A cycle error naming the rank files and tasks involved (instead of node ids)."""
    count, stuck = getattr(exc, "stuck", (0, []))
    tasks, files = [], []
    for v in stuck:
        r, e = int(node["rank"][v]), int(node["event"][v])
        if r < 0 or e < 0:  # a collective's join node
            continue
        t = job.rank(r)
        tasks.append(f"{t.name_of(e)!r} (rank {r})")
        files.append(t.file.rsplit("/", 1)[-1])
    if not tasks:
        return str(exc)
    return (
        f"{', '.join(dict.fromkeys(files))}: the execution graph has a cycle ({count} tasks can never "
        f"start, e.g. {', '.join(tasks[:3])}); a cudaStreamWaitEvent or sync was probably paired "
        "with the wrong work"
    )
