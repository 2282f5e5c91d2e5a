"""Build the execution graph of a job (the types are in :mod:`lumos_core.graph.model`).

Per rank: choose the tasks (:mod:`~lumos_core.graph.nodes`) and run every dependency rule of
:mod:`lumos_core.graph.edges` on them; then join the ranks through their collectives, anchor the tasks
nothing precedes at their measured start, calibrate the lags (:mod:`~lumos_core.graph.calibrate`),
lay the edges out by destination and order the nodes (:mod:`~lumos_core.graph.order`).
"""

from __future__ import annotations

import numpy as np

from lumos_core.errors import GraphError
from lumos_core.graph.calibrate import calibrate_end_lags, calibrate_start_lags
from lumos_core.graph.edges import (
    RANK_RULES,
    EdgeList,
    RankContext,
    collective_joins,
    typical_launch_latency,
)
from lumos_core.graph.factory import Dependencies, make_graph
from lumos_core.graph.model import NO_ANCHOR, EdgeKind, ExecutionGraph, GraphOrigin, NodeType
from lumos_core.graph.nodes import RankNodes, rank_nodes
from lumos_core.os_memory import release_free_heap
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.model import Job

# Names other modules imported from here before the graph code was split.
__all__ = ["NO_ANCHOR", "EdgeKind", "ExecutionGraph", "NodeType", "build_graph", "typical_launch_latency"]


def build_graph(
    job: Job,
    *,
    progress: Progress = no_progress,
    calibrate: bool = True,
    absorb_unexplained: bool = False,
    without: frozenset[EdgeKind] = frozenset(),
) -> ExecutionGraph:
    """Build the execution graph of every rank of ``job`` and link the ranks through collectives.

    ``without``: dependency kinds left out (ablation: what each kind is worth). Without
    ``COLLECTIVE`` the ranks are not joined at all (no arrive/join/transfer nodes, for send/recv
    neither): each collective kernel is an ordinary kernel of its stream."""
    if not job.ranks:
        raise GraphError("the job has no ranks")
    sp = EdgeList()
    ep = EdgeList()
    ranks: list[RankNodes] = []
    node_rank, node_event, node_type, node_proc, node_dur, node_ms, node_me = [], [], [], [], [], [], []
    procs: list[tuple[int, int]] = []
    base = 0
    notes: list[str] = []
    latency = typical_launch_latency(job)
    for i, t in enumerate(job.ranks):
        progress(0.6 * i / len(job.ranks), f"graph of rank {t.rank}")
        rn = rank_nodes(t, base)
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
        ctx = RankContext(t, rn, sp, ep, notes, latency)
        for rule in RANK_RULES:
            rule(ctx)
        # only the rules need these per-event maps: free them now rather than hold every rank's
        rn.first_leaf_after = rn.last_leaf_within = np.zeros(0, np.int64)
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
    if EdgeKind.COLLECTIVE not in without:
        node, arrive_of = collective_joins(job, ranks, node, arrive_of, sp, notes)

    s_src, s_dst, s_lag, s_end, s_kind = sp.arrays()
    e_src, e_dst, e_lag, e_end, e_kind = ep.arrays()
    if without:
        gone = np.asarray(sorted(int(k) for k in without), np.int8)
        ks = ~np.isin(s_kind, gone)
        s_src, s_dst, s_lag, s_end, s_kind = s_src[ks], s_dst[ks], s_lag[ks], s_end[ks], s_kind[ks]
        ke = ~np.isin(e_kind, gone)
        e_src, e_dst, e_lag, e_end, e_kind = e_src[ke], e_dst[ke], e_lag[ke], e_end[ke], e_kind[ke]
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
        s_lag, unexplained = calibrate_start_lags(
            node, s_src, s_dst, s_lag, s_end, anchor, absorb_unexplained
        )
        e_lag = calibrate_end_lags(node, e_src, e_dst, e_lag, e_end)

    progress(0.85, "ordering tasks")
    graph = make_graph(
        job,
        origin=GraphOrigin.TRACED,
        rank=node["rank"],
        event=node["event"],
        node_type=node["type"],
        proc=node["proc"],
        dur=node["dur"],
        anchor=anchor,
        start_deps=Dependencies(s_src, s_dst, s_lag, s_end, s_kind),
        end_deps=Dependencies(e_src, e_dst, e_lag, e_end, e_kind),
        procs=procs,
        arrive_of=arrive_of,
        measured=(node["ms"], node["me"]),
        rank_nodes={rn.rank.rank: rn.node_of_event for rn in ranks},
        unexplained_ns=unexplained,
        notes=_summarise_notes(notes)
        + (
            [f"built without {', '.join(sorted(k.name.lower() for k in without))} dependencies"]
            if without
            else []
        ),
    )
    release_free_heap()  # building frees many mid-sized temporaries the C heap would keep
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
