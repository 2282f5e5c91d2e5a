"""Turn the simulation of a rewritten graph (:mod:`lumos_core.whatif.rewrite`) into per-rank timelines in
the loader's columnar shape: every copied task becomes an event row (its source event's name,
category, arguments), operators and annotations around copied tasks come along, and the rewrite's
own send/recv tasks and ``ProfilerStep#N`` ranges are added. The result loads, draws and exports
like a measured rank.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import orjson

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Collectives, Kind, Lane, LaneRole, RankTrace
from lumos_core.trace.rank_analysis import analyse_rank
from lumos_core.whatif.parent_placement import copies_of, parent_copy, place
from lumos_core.whatif.rewrite import PP_STREAM, PREV_LANE, Rewritten


class _Rows:
    """Event rows of one new rank, filled from copies and created events."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.ids: dict[str, int] = {}
        self.kind: list[int] = []
        self.cat: list[int] = []
        self.name: list[int] = []
        self.lane: list[int] = []
        self.start: list[int] = []
        self.dur: list[int] = []
        self.corr: list[int] = []
        self.ext: list[int] = []
        self.args_start: list[int] = []
        self.args_len: list[int] = []
        self.node: list[int] = []  # graph node behind the row (-1: none)
        # Nesting among rows with the same start and duration (a parent squeezed to its children's
        # span): outer operators first, tasks last.
        self.nesting: list[int] = []
        self.blob = bytearray()
        self.blob_base: dict[int, int] = {}

    def intern(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def args_ref(self, src: RankTrace, event: int) -> tuple[int, int]:
        base = self.blob_base.get(src.rank)
        if base is None:
            base = self.blob_base[src.rank] = len(self.blob)
            self.blob += src.args_data.tobytes()
        return base + int(src.args_start[event]), int(src.args_len[event])

    def own_args(self, args: dict) -> tuple[int, int]:
        data = orjson.dumps(args)
        start = len(self.blob)
        self.blob += data
        return start, len(data)

    def add(
        self,
        kind: int,
        cat: str,
        name: str,
        lane: int,
        start: int,
        dur: int,
        corr: int,
        ext: int,
        args: tuple[int, int],
        node: int,
        nesting: int = 1 << 15,
    ) -> None:
        self.kind.append(kind)
        self.cat.append(self.intern(cat))
        self.name.append(self.intern(name))
        self.lane.append(lane)
        self.start.append(int(start))
        self.dur.append(max(int(dur), 0))
        self.corr.append(corr)
        self.ext.append(ext)
        self.args_start.append(args[0])
        self.args_len.append(args[1])
        self.node.append(node)
        self.nesting.append(nesting)


def rewritten_timelines(
    rw: Rewritten, start: np.ndarray, end: np.ndarray, by_rank: dict[int, RankTrace]
) -> tuple[list[RankTrace], dict[int, np.ndarray]]:
    """Predicted RankTraces (one per simulated rank) and, per rank, the graph node of every event."""
    g = rw.graph
    out: list[RankTrace] = []
    labels = _collective_labels(rw)
    coll_events: dict[int, set[int]] = {}
    node_of_rows: dict[int, np.ndarray] = {}
    for nr in sorted(rw.lanes):
        rows = _Rows()
        lanes = _make_lanes(rw.lanes[nr], by_rank)
        proc_lane = {p: lane for p, (r, lane) in enumerate(g.procs) if r == nr}
        nodes = np.flatnonzero(
            (rw.new_rank == nr) & (g.node_type != NodeType.JOIN) & (g.node_type != NodeType.ARRIVE)
        )
        corr_base = 1 << 40
        solo: dict[str, int] = defaultdict(int)  # instances of collectives no other simulated rank joins
        desc: dict[tuple[int, int, int], list[int]] = defaultdict(list)  # (inst, src rank, ancestor) -> rows
        for v in nodes.tolist():
            s_node = int(g.arrive_of[v]) if g.arrive_of[v] >= 0 else v
            lane = proc_lane[int(g.proc[v])]
            inst = int(rw.instance[v])
            if g.event[v] < 0:  # created by the rewrite: a pipeline send/recv
                _add_p2p(
                    rows,
                    rw.extra[v],
                    g.node_type[v],
                    lane,
                    int(start[s_node]),
                    int(end[v] - start[s_node]),
                    corr_base + _launcher(g, s_node),
                    v,
                    labels.get(_join_of(g, v)),
                )
                continue
            src = by_rank[int(g.rank[v])]
            e = int(g.event[v])
            on_coll = coll_events.get(src.rank)
            if on_coll is None:  # built once per source rank (setdefault would build it per node)
                on_coll = coll_events[src.rank] = set(src.collectives.event.tolist())
            corr = int(src.correlation[e])
            new_corr = -1 if corr < 0 else (inst + 1) * (1 << 32) + corr
            rows.add(
                int(src.kind[e]),
                src.strings[int(src.cat[e])],
                src.strings[int(src.name[e])],
                lane,
                int(start[s_node]),
                int(end[v] - start[s_node]),
                new_corr,
                int(src.external_id[e]),
                _collective_args(rows, src, e, _label(g, v, nr, labels, solo))
                if e in on_coll
                else rows.args_ref(src, e),
                v,
            )
            if src.kind[e] not in GPU_ACTIVITY_KINDS:
                p = int(src.parent[e])
                while p >= 0:
                    desc[(inst, src.rank, p)].append(len(rows.kind) - 1)
                    p = int(src.parent[p])
        # Operators and annotations around copied tasks move with them.
        row_start = np.asarray(rows.start, np.int64)
        row_end = row_start + np.asarray(rows.dur, np.int64)
        copies = []
        for (_inst, r, p), all_members in desc.items():
            src = by_rank[r]
            if src.strings[int(src.name[p])].startswith("ProfilerStep#"):
                continue
            for m in copies_of(all_members, row_start, rows.node, g):
                copies.append(parent_copy(g, src, p, m, row_start, row_end, rows.node, rows.lane))
        place(copies, row_start, row_end, np.asarray(rows.lane, np.int64))
        for c in copies:
            rows.add(
                int(c.src.kind[c.event]),
                c.src.strings[int(c.src.cat[c.event])],
                c.src.strings[int(c.src.name[c.event])],
                c.lane,
                c.start,
                c.end - c.start,
                -1,
                int(c.src.external_id[c.event]),
                rows.args_ref(c.src, c.event),
                -1,
                int(c.src.depth[c.event]),
            )
        _add_steps(rows, rw, nr, start, end, lanes)
        t, order = _assemble(nr, rows, lanes, by_rank)
        node_of_rows[nr] = np.asarray(rows.node, np.int64)[order]
        out.append(t)
    return out, node_of_rows


def _make_lanes(sources: list[tuple[int, int]], by_rank: dict[int, RankTrace]) -> list[Lane]:
    lanes = []
    device = 0
    for i, (r, lane) in enumerate(sources):
        if r == -2:  # the gradient all-reduce stream the rewrite adds
            lanes.append(
                Lane(
                    index=i,
                    is_gpu=True,
                    pid=device,
                    tid=PP_STREAM + 1,
                    name=f"stream {PP_STREAM + 1}",
                    role=LaneRole.COMMUNICATION,
                    device=device,
                    stream=PP_STREAM + 1,
                )
            )
            continue
        if r < 0:  # the pipeline stream (interleaved: to the next stage; PREV_LANE: to the previous)
            stream = PP_STREAM + 2 if lane == PREV_LANE else PP_STREAM
            lanes.append(
                Lane(
                    index=i,
                    is_gpu=True,
                    pid=device,
                    tid=stream,
                    name=f"stream {stream}",
                    role=LaneRole.COMMUNICATION,
                    device=device,
                    stream=stream,
                )
            )
            continue
        ln = by_rank[r].lanes[lane]
        if ln.is_gpu:
            device = ln.device
        lanes.append(
            Lane(
                index=i,
                is_gpu=ln.is_gpu,
                pid=ln.pid,
                tid=ln.tid,
                name=ln.name,
                role=ln.role,
                device=ln.device,
                stream=ln.stream,
            )
        )
    return lanes


def _collective_labels(rw: Rewritten) -> dict[int, tuple[str, int]]:
    """Join node -> (group suffix, sequence number) for every collective instance of the new job.

    Copied collectives keep the arguments of the traced ones, so several instances (template copies,
    other pipeline stages) would carry one process group name and Seq: an exported prediction read
    back would join the wrong kernels. Naming the group by the simulated ranks that take part and
    numbering its instances keeps every instance distinct and the same on all of its ranks."""
    g = rw.graph
    new_rank = np.asarray(rw.new_rank)
    out: dict[int, tuple[str, int]] = {}
    count: dict[str, int] = defaultdict(int)
    for j in np.flatnonzero(g.node_type == NodeType.JOIN).tolist():
        srcs = g.sp_src[g.sp_ptr[j] : g.sp_ptr[j + 1]]
        members = sorted({int(r) for r in new_rank[srcs].tolist()})
        key = "-".join(map(str, members))
        out[j] = (key, count[key])
        count[key] += 1
    return out


def _label(
    g: ExecutionGraph, v: int, nr: int, labels: dict[int, tuple[str, int]], solo: dict[str, int]
) -> tuple[str, int]:
    """The group suffix and Seq of collective node ``v`` on simulated rank ``nr``. A collective no
    other simulated rank joins (its peers are copies of ``nr``) is numbered per rank, in node order,
    which every copy shares."""
    label = labels.get(_join_of(g, v)) if g.arrive_of[v] >= 0 else None
    if label is not None:
        return label
    key = f"{nr}"
    solo[key] += 1
    return key, solo[key] - 1


def _join_of(g: ExecutionGraph, v: int) -> int:
    """The JOIN node a collective transfer node follows (-1 if none)."""
    for j in g.sp_src[g.sp_ptr[v] : g.sp_ptr[v + 1]].tolist():
        if g.node_type[j] == NodeType.JOIN:
            return int(j)
    return -1


def _collective_args(rows: _Rows, src: RankTrace, e: int, label: tuple[str, int] | None) -> tuple[int, int]:
    if label is None:
        return rows.args_ref(src, e)
    args = src.args_of(e)
    pg = args.get("Process Group Name") or args.get("Process Group Ranks") or "pg"
    return rows.own_args({**args, "Process Group Name": f"{pg}@ranks {label[0]}", "Seq": label[1]})


def _launcher(g: ExecutionGraph, v: int) -> int:
    """The CPU node that launches GPU node ``v`` (``v`` itself for CPU nodes and unlaunched work), so
    that a created launch and its kernel share one correlation id."""
    lo, hi = int(g.sp_ptr[v]), int(g.sp_ptr[v + 1])
    for j in range(lo, hi):
        if g.sp_kind[j] == EdgeKind.LAUNCH:
            return int(g.sp_src[j])
    return v


def _add_p2p(
    rows: _Rows,
    what: str,
    node_type: int,
    lane: int,
    start: int,
    dur: int,
    corr: int,
    node: int,
    label: tuple[str, int] | None = None,
) -> None:
    op = what.split("+")[0]
    group = {"Seq": label[1]} if label else {}
    if op == "allreduce":
        if node_type == NodeType.CPU:
            rows.add(int(Kind.CPU_OP), "cpu_op", "c10d::allreduce_", lane, start, dur, -1, -1, (0, 0), node)
        else:
            args = rows.own_args(
                {
                    "Collective name": "allreduce",
                    "dtype": "BFloat16",
                    "lumos_created": True,
                    **({"Process Group Name": f"gradients@ranks {label[0]}"} if label else {}),
                    **group,
                }
            )
            rows.add(
                int(Kind.KERNEL),
                "kernel",
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                lane,
                start,
                dur,
                corr,
                -1,
                args,
                node,
            )
        return
    if op == "wait":
        rows.add(
            int(Kind.RUNTIME), "cuda_runtime", "cudaStreamSynchronize", lane, start, dur, -1, -1, (0, 0), node
        )
        return
    if node_type == NodeType.CPU:
        rows.add(int(Kind.CPU_OP), "cpu_op", f"nccl:{op}", lane, start, dur, -1, -1, (0, 0), node)
        rows.add(
            int(Kind.RUNTIME),
            "cuda_runtime",
            "cudaLaunchKernel",
            lane,
            start + 1,
            min(5_000, dur),
            corr,
            -1,
            (0, 0),
            -1,
        )
    else:
        args = rows.own_args(
            {
                "Collective name": op,
                "dtype": "BFloat16",
                "Process Group Name": f"pipeline@ranks {label[0]}" if label else "pipeline",
                "Group size": 2,
                "lumos_created": True,
                **group,
            }
        )
        rows.add(
            int(Kind.KERNEL),
            "kernel",
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            lane,
            start,
            dur,
            corr,
            -1,
            args,
            node,
        )


def _add_steps(
    rows: _Rows, rw: Rewritten, nr: int, start: np.ndarray, end: np.ndarray, lanes: list[Lane]
) -> None:
    """ProfilerStep#N on the main thread: from an iteration's first CPU task to the next one's."""
    g = rw.graph
    main = next((ln.index for ln in lanes if ln.role == LaneRole.CPU_MAIN), 0)
    mine = rw.new_rank == nr
    cpu = mine & (g.node_type == NodeType.CPU)
    firsts = rw.iterations[nr]
    bounds = []
    for k, first_inst in enumerate(firsts):
        last_inst = firsts[k + 1] if k + 1 < len(firsts) else 1 << 60
        sel = cpu & (rw.instance >= first_inst) & (rw.instance < last_inst)
        if sel.any():
            bounds.append(
                (
                    int(start[sel].min()),
                    int(end[mine & (rw.instance >= first_inst) & (rw.instance < last_inst)].max()),
                )
            )
    # An operator around an iteration's first task starts before it (its lead): so does the step.
    on_main = np.asarray(rows.lane, np.int64) == main
    row_start = np.asarray(rows.start, np.int64)[on_main]
    row_end = row_start + np.asarray(rows.dur, np.int64)[on_main]
    for k, (s, e) in enumerate(bounds):
        straddle = (row_start < s) & (row_end > s)
        if straddle.any():
            bounds[k] = (int(row_start[straddle].min()), e)
    for k, (s, e) in enumerate(bounds):
        if k + 1 < len(bounds):
            stop = bounds[k + 1][0]
        else:  # the last step holds the operators it started, tails included
            stop = max([e, *row_end[row_start >= s].tolist()])
        rows.add(
            int(Kind.USER_ANNOTATION),
            "user_annotation",
            f"ProfilerStep#{k + 1}",
            main,
            s,
            max(stop - s, 1),
            -1,
            -1,
            (0, 0),
            -1,
            -1,  # outermost
        )


def _assemble(
    nr: int, rows: _Rows, lanes: list[Lane], by_rank: dict[int, RankTrace]
) -> tuple[RankTrace, np.ndarray]:
    n = len(rows.kind)
    start = np.asarray(rows.start, np.int64)
    dur = np.asarray(rows.dur, np.int64)
    lane = np.asarray(rows.lane, np.int32)
    shift = int(start.min()) if n else 0
    order = np.lexsort((np.asarray(rows.nesting, np.int64), -dur, start, lane))
    lane_sorted = lane[order]
    first_src = next(iter(by_rank.values()))
    t = RankTrace(
        rank=nr,
        file=f"predicted rank {nr}",
        rank_source="prediction",
        strings=rows.strings,
        lanes=lanes,
        kind=np.asarray(rows.kind, np.int8)[order],
        cat=np.asarray(rows.cat, np.int32)[order],
        name=np.asarray(rows.name, np.int32)[order],
        lane=lane_sorted,
        start=start[order] - shift,
        dur=dur[order],
        correlation=np.asarray(rows.corr, np.int64)[order],
        external_id=np.asarray(rows.ext, np.int64)[order],
        depth=np.zeros(n, np.int16),
        parent=np.full(n, -1, np.int32),
        launch=np.full(n, -1, np.int32),
        args_start=np.asarray(rows.args_start, np.int64)[order],
        args_len=np.asarray(rows.args_len, np.int32)[order],
        args_data=np.frombuffer(bytes(rows.blob), np.uint8),
        lane_begin=np.searchsorted(lane_sorted, np.arange(len(lanes) + 1)).astype(np.int64),
        collectives=Collectives.empty(),
        flow_kind=np.zeros(0, np.int8),
        flow_id=np.zeros(0, np.int64),
        flow_phase=np.zeros(0, np.int8),
        flow_ts=np.zeros(0, np.int64),
        flow_event=np.zeros(0, np.int32),
        instant_name=np.zeros(0, np.int32),
        instant_ts=np.zeros(0, np.int64),
        iterations=[],
        metadata={k: v for k, v in first_src.metadata.items() if k in ("deviceProperties", "schemaVersion")},
    )
    roles = [ln.role for ln in lanes]
    analyse_rank(t, flow_lanes=[])
    for ln, role in zip(t.lanes, roles):  # keep the roles the lanes had in the trace
        ln.role = role
    return t, order
