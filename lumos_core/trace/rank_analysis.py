"""Derive what one rank's columns imply: nesting, launch links, flows, stream roles, collectives, steps.

Runs in the loader's worker process right after the columns are built, so its results are cached
with them. Everything here needs only the rank itself; cross-rank work (collective matching,
clock alignment) happens in :mod:`lumos_core.trace.collectives` and :mod:`lumos_core.trace.clocks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lumos_core.trace.kineto_schema import (
    collective_kind,
    dtype_bytes,
    is_comm_kernel,
    kernel_dtype_bytes,
    profiler_step,
)
from lumos_core.trace.model import (
    COLLECTIVE_COLUMNS,
    CPU_LANE_KINDS,
    GPU_ACTIVITY_KINDS,
    CollectiveKind,
    Collectives,
    FlowKind,
    Iteration,
    Kind,
    LaneRole,
    RankTrace,
)


def analyse_rank(rank: RankTrace, flow_lanes: list[tuple[int, int]]) -> None:
    """Fill depth/parent, flow binding, launch links, lane roles, collectives and iterations."""
    comm_names = rank.names_matching(is_comm_kernel)
    _nest(rank)
    _bind_flows(rank, flow_lanes)
    _link_launches(rank)
    _assign_roles(rank, comm_names)
    rank.collectives = _collectives(rank, comm_names)
    rank.iterations = find_iterations(rank)


def _nest(rank: RankTrace) -> None:
    """CPU lanes: parent = innermost enclosing event, depth = nesting level.
    GPU lanes: depth = sub-row so that overlapping activities never hide each other."""
    starts = rank.start.tolist()
    ends = (rank.start + rank.dur).tolist()
    kinds = rank.kind.tolist()
    depth = rank.depth
    parent = rank.parent
    activity = {int(k) for k in GPU_ACTIVITY_KINDS}
    for lane in rank.lanes:
        a, b = int(rank.lane_begin[lane.index]), int(rank.lane_begin[lane.index + 1])
        if lane.is_gpu:
            rows: list[int] = []  # end time of the last activity in each sub-row
            for i in range(a, b):
                if kinds[i] not in activity:
                    continue
                s = starts[i]
                for r, row_end in enumerate(rows):
                    if row_end <= s:
                        rows[r] = ends[i]
                        depth[i] = r
                        break
                else:
                    depth[i] = len(rows)
                    rows.append(ends[i])
            continue
        stack: list[int] = []
        for i in range(a, b):
            s = starts[i]
            while stack and ends[stack[-1]] <= s and not (ends[stack[-1]] == s and starts[stack[-1]] == s):
                stack.pop()
            if stack:
                parent[i] = stack[-1]
            depth[i] = len(stack)
            stack.append(i)


def _bind_flows(rank: RankTrace, flow_lanes: list[tuple[int, int]]) -> None:
    """Bind each flow endpoint to the event that starts at its timestamp on its lane.

    Events are sorted by (lane, start), so the composite key lane·2^50 + start is sorted too and
    one searchsorted binds every endpoint (a flow may name a CPU thread or a stream: try both)."""
    if not flow_lanes:
        return
    keys = (rank.lane.astype(np.int64) << 50) + rank.start
    cand = np.asarray(flow_lanes, np.int64).reshape(-1, 2)
    ts = rank.flow_ts
    for col in (0, 1):
        lanes = cand[:, col]
        todo = (rank.flow_event < 0) & (lanes >= 0)
        if not todo.any():
            continue
        fk = (lanes[todo] << 50) + ts[todo]
        pos = np.searchsorted(keys, fk)
        pos_c = np.minimum(pos, len(keys) - 1)
        hit = (pos < len(keys)) & (keys[pos_c] == fk)
        idx = np.flatnonzero(todo)
        rank.flow_event[idx[hit]] = pos_c[hit]


def _link_launches(rank: RankTrace) -> None:
    """GPU activity (and cuda_sync event) -> the runtime call with the same correlation id.

    Falls back to ac2g flows for activities whose correlation is missing."""
    corr = rank.correlation
    runtime = np.flatnonzero((rank.kind == Kind.RUNTIME) & (corr >= 0))
    targets = np.flatnonzero(
        (np.isin(rank.kind, GPU_ACTIVITY_KINDS) | (rank.kind == Kind.CUDA_SYNC)) & (corr >= 0)
    )
    if len(runtime) and len(targets):
        rc = corr[runtime]
        order = np.argsort(rc, kind="stable")
        rc_sorted = rc[order]
        dup = int(np.count_nonzero(rc_sorted[1:] == rc_sorted[:-1]))
        if dup:
            rank.warnings.append(
                f"{dup} correlation ids appear on several runtime calls; each GPU activity "
                "is linked to the first"
            )
        pos = np.searchsorted(rc_sorted, corr[targets])
        pos_c = np.minimum(pos, len(rc_sorted) - 1)
        hit = (pos < len(rc_sorted)) & (rc_sorted[pos_c] == corr[targets])
        rank.launch[targets[hit]] = runtime[order[pos_c[hit]]]
    # ac2g fallback: flow 's' on the runtime call, flow 'f' on the activity, same id.
    unlinked = np.isin(rank.kind, GPU_ACTIVITY_KINDS) & (rank.launch < 0)
    if unlinked.any() and len(rank.flow_id):
        bound = (rank.flow_kind == FlowKind.LAUNCH) & (rank.flow_event >= 0)
        ev = rank.flow_event
        starts = bound & (rank.flow_phase == 0)
        starts[starts] = rank.kind[ev[starts]] == Kind.RUNTIME
        ends = bound & (rank.flow_phase == 1)
        ends[ends] = unlinked[ev[ends]]
        if starts.any() and ends.any():
            sid, sev = rank.flow_id[starts], ev[starts]
            order = np.argsort(sid, kind="stable")
            sid, sev = sid[order], sev[order]
            pos = np.searchsorted(sid, rank.flow_id[ends])
            pos_c = np.minimum(pos, len(sid) - 1)
            hit = (pos < len(sid)) & (sid[pos_c] == rank.flow_id[ends])
            rank.launch[ev[ends][hit]] = sev[pos_c[hit]]
    n_act = int(np.count_nonzero(np.isin(rank.kind, GPU_ACTIVITY_KINDS)))
    missing = int(np.count_nonzero(np.isin(rank.kind, GPU_ACTIVITY_KINDS) & (rank.launch < 0)))
    if missing:
        rank.warnings.append(
            f"{missing} of {n_act} GPU activities have no launch call in the trace "
            "(launched before the profiling window, or by an untraced thread)"
        )


def _assign_roles(rank: RankTrace, comm_names: np.ndarray) -> None:
    names = rank.name
    kinds = rank.kind
    main_candidates: list[tuple[int, int]] = []
    step_names = rank.names_matching(lambda s: profiler_step(s) is not None)
    for lane in rank.lanes:
        sl = rank.lane_slice(lane.index)
        k = kinds[sl]
        if lane.is_gpu:
            act = np.isin(k, GPU_ACTIVITY_KINDS)
            if not act.any():
                lane.role = LaneRole.GPU_OTHER
                continue
            d = rank.dur[sl][act]
            comm = comm_names[names[sl][act]] & (k[act] == Kind.KERNEL)
            copies = k[act] != Kind.KERNEL
            total = max(int(d.sum()), 1)
            if int(d[comm].sum()) * 2 > total or (comm.sum() * 2 > len(d) and int(d.sum()) == 0):
                lane.role = LaneRole.COMMUNICATION
            elif copies.sum() * 2 > len(d):
                lane.role = LaneRole.MEMCPY
            else:
                lane.role = LaneRole.COMPUTE
            continue
        lname = lane.name.lower()
        top = rank.parent[sl] < 0  # the autograd engine shows in the thread's top-level operators
        ops = names[sl][(k == Kind.CPU_OP) & top]
        autograd_ops = sum(1 for s in ops[:200].tolist() if rank.strings[s].startswith("autograd::engine"))
        if (
            "autograd" in lname
            or "backward" in lname
            or (len(ops) and autograd_ops * 4 >= min(len(ops), 200))
        ):
            lane.role = LaneRole.CPU_AUTOGRAD
        else:
            lane.role = LaneRole.CPU_OTHER
            has_step = bool(step_names[names[sl]].any())
            main_candidates.append(
                (1 if has_step else 0, int(np.count_nonzero(k == Kind.CPU_OP)) + len(ops), lane.index)
            )  # type: ignore[arg-type]
    if main_candidates:
        main = max(main_candidates)[2]
        rank.lanes[main].role = LaneRole.CPU_MAIN


def _collectives(rank: RankTrace, comm_names: np.ndarray) -> Collectives:
    """One row per NCCL/RCCL kernel with its metadata (kernel args > record_param_comms > name)."""
    rows = np.flatnonzero((rank.kind == Kind.KERNEL) & comm_names[rank.name])
    if len(rows) == 0:
        return Collectives.empty()
    rpc_name = rank.string_id("record_param_comms")
    cols: dict[str, list[int]] = {c: [] for c in COLLECTIVE_COLUMNS}
    intern_cache: dict[str, int] = {}

    def sid(s: Any) -> int:
        if s is None or s == "":
            return -1
        s = str(s)
        if s not in intern_cache:
            i = rank.string_id(s)
            if i < 0:
                i = len(rank.strings)
                rank.strings.append(s)
            intern_cache[s] = i
        return intern_cache[s]

    op_kinds: dict[int, CollectiveKind] = {}

    def op_kind(event: int) -> CollectiveKind:
        """The collective named by the nearest enclosing c10d:: / nccl: operator of ``event``."""
        for _ in range(64):  # nesting is shallow; the bound guards against corrupt parent chains
            if event < 0:
                return CollectiveKind.UNKNOWN
            name = int(rank.name[event])
            if name not in op_kinds:
                text = rank.strings[name]
                is_comm_op = text.startswith(("c10d::", "nccl:")) and rank.kind[event] == Kind.CPU_OP
                op_kinds[name] = collective_kind(text) if is_comm_op else CollectiveKind.UNKNOWN
            if op_kinds[name] != CollectiveKind.UNKNOWN:
                return op_kinds[name]
            event = int(rank.parent[event])
        return CollectiveKind.UNKNOWN

    for ev in rows.tolist():
        args = rank.args_of(ev)
        source = 0
        if "Collective name" not in args:
            source = 2
            op = _enclosing(rank, int(rank.launch[ev]), rpc_name)
            if op >= 0:
                args = {**rank.args_of(op), **args}
                source = 1
        kname = rank.strings[int(rank.name[ev])]
        coll_name = args.get("Collective name")
        kind = collective_kind(str(coll_name)) if coll_name else CollectiveKind.UNKNOWN
        if kind == CollectiveKind.UNKNOWN:
            kind = collective_kind(kname)
            if kind == CollectiveKind.SEND_RECV and not coll_name:
                # NCCL runs all-to-all (and scatter/gather) as grouped SendRecv kernels: without a
                # "Collective name" the operator that issued it (c10d::alltoall_base_ /
                # nccl:all_to_all) says what it was.
                issued = op_kind(int(rank.launch[ev]))
                if issued not in (CollectiveKind.UNKNOWN, CollectiveKind.SEND, CollectiveKind.RECV):
                    kind = issued
        dt = dtype_bytes(str(args.get("dtype", ""))) or kernel_dtype_bytes(kname)
        ranks_str = args.get("Process Group Ranks")
        group_size = _int32(args.get("Group size"))
        if group_size < 0 and isinstance(ranks_str, str) and ranks_str.startswith("["):
            group_size = ranks_str.count(",") + 1 if ranks_str.strip("[] ") else 0
        pg_name = args.get("Process Group Name")
        peer = _int32(args.get("Dst Rank")) if kind == CollectiveKind.SEND else _int32(args.get("Src Rank"))
        if peer < 0:
            peer = _int32(args.get("Dst Rank", args.get("Src Rank")))
        cols["event"].append(ev)
        cols["kind"].append(int(kind))
        cols["in_nelems"].append(_int(args.get("In msg nelems")))
        cols["out_nelems"].append(_int(args.get("Out msg nelems")))
        cols["dtype_bytes"].append(dt)
        cols["pg"].append(sid(pg_name) if pg_name not in (None, "") else sid(ranks_str))
        cols["group_size"].append(group_size)
        cols["group_ranks"].append(sid(ranks_str))
        cols["seq"].append(_int(args.get("Seq", args.get("seq"))))
        cols["peer"].append(peer)
        cols["source"].append(source)
    _fill_group_from_stream(rank, cols)
    dtypes = {
        "event": np.int32,
        "kind": np.int8,
        "in_nelems": np.int64,
        "out_nelems": np.int64,
        "dtype_bytes": np.int8,
        "pg": np.int32,
        "group_size": np.int32,
        "group_ranks": np.int32,
        "seq": np.int64,
        "peer": np.int32,
        "source": np.int8,
    }
    return Collectives(**{c: np.asarray(v, dtypes[c]) for c, v in cols.items()})


def _fill_group_from_stream(rank: RankTrace, cols: dict[str, list[int]]) -> None:
    """Rows without process-group metadata (their launch lies outside the profiling window) take the
    group of the other collectives on their stream: ProcessGroupNCCL runs one communicator per stream."""
    by_stream: dict[int, set[tuple[int, int, int]]] = {}
    lanes = rank.lane[cols["event"]].tolist()
    for lane, pg, size, granks in zip(lanes, cols["pg"], cols["group_size"], cols["group_ranks"]):
        if pg >= 0:
            by_stream.setdefault(lane, set()).add((pg, size, granks))
    for i, lane in enumerate(lanes):
        known = by_stream.get(lane)
        if cols["pg"][i] < 0 and known is not None and len(known) == 1:
            pg, size, granks = next(iter(known))
            cols["pg"][i] = pg
            if cols["group_size"][i] < 0:
                cols["group_size"][i] = size
            if cols["group_ranks"][i] < 0:
                cols["group_ranks"][i] = granks


def _enclosing(rank: RankTrace, event: int, name_id: int) -> int:
    """The nearest ancestor of ``event`` (on its CPU lane) named ``name_id``, or -1."""
    if name_id < 0:
        return -1
    i = event
    for _ in range(64):  # nesting is shallow; the bound guards against corrupt parent chains
        if i < 0:
            return -1
        if rank.name[i] == name_id:
            return i
        i = int(rank.parent[i])
    return -1


def _int(v: Any) -> int:
    if isinstance(v, bool):
        return -1
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else -1
    if isinstance(v, float) and v == v and abs(v) < 2**62:
        return int(v)
    if isinstance(v, str):
        # ASCII digits, int64-sized: "²" passes isdigit() but not int(), and a 30-digit count
        # would overflow the int64 columns.
        d = v.strip().removeprefix("-")
        if 0 < len(d) <= 18 and d.isascii() and d.isdigit():
            return int(v)
    return -1


def _int32(v: Any) -> int:
    """:func:`_int` for the int32 columns (group size, peer rank): -1 when it does not fit."""
    i = _int(v)
    return i if -(2**31) <= i < 2**31 else -1


def find_iterations(rank: RankTrace) -> list[Iteration]:
    """Profiler steps: ``ProfilerStep#N`` on the CPU (outermost per N) and its GPU twin, if any."""
    step_of = [profiler_step(s) for s in rank.strings]
    named = np.asarray([s is not None for s in step_of], bool)
    if not named.any():
        return []
    idx = np.flatnonzero(named[rank.name])
    cpu: dict[int, tuple[int, int]] = {}
    gpu: dict[int, tuple[int, int]] = {}
    names: dict[int, str] = {}
    for i in idx.tolist():
        n = step_of[int(rank.name[i])]
        assert n is not None
        s, e = int(rank.start[i]), int(rank.start[i] + rank.dur[i])
        names[n] = rank.strings[int(rank.name[i])]
        target = gpu if rank.kind[i] == Kind.GPU_ANNOTATION else cpu
        if rank.kind[i] != Kind.GPU_ANNOTATION and not np.isin(rank.kind[i], CPU_LANE_KINDS):
            continue
        if n in target:
            s0, e0 = target[n]
            target[n] = (min(s0, s), max(e0, e))
        else:
            target[n] = (s, e)
    out = []
    for n in sorted(cpu):
        s, e = cpu[n]
        gs, ge = gpu.get(n, (-1, -1))
        out.append(Iteration(name=names[n], step=n, cpu_start=s, cpu_end=e, gpu_start=gs, gpu_end=ge))
    return out
