"""Build the execution graph of a job (the types are in :mod:`lumos_core.graph.model`).

Per rank: choose the tasks (:mod:`~lumos_core.graph.nodes`) and run every dependency rule of
:mod:`lumos_core.graph.edges` on them; then join the ranks through their collectives, anchor the tasks
nothing precedes at their measured start, calibrate the lags (:mod:`~lumos_core.graph.calibrate`),
lay the edges out by destination and order the nodes (:mod:`~lumos_core.graph.order`).
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

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
from lumos_core.graph.edges.collectives import collective_arrivals
from lumos_core.graph.factory import Dependencies, make_graph
from lumos_core.graph.model import NO_ANCHOR, EdgeKind, ExecutionGraph, GraphOrigin, NodeType
from lumos_core.graph.nodes import RankNodes, leaf_maps, rank_nodes
from lumos_core.os_memory import release_free_heap
from lumos_core.progress import Progress, no_progress
from lumos_core.rank_threads import map_in_order
from lumos_core.trace.model import Job, RankTrace

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
    ranks: list[RankNodes] = []
    base = 0
    for t in job.ranks:  # every rank's tasks first: the node ids are then known...
        ranks.append(rank_nodes(t, base, maps=False))
        base += len(ranks[-1].events)
    if base == 0:
        raise GraphError(f"{job.path}: no CPU or GPU work to replay (no tasks in any rank)")
    joins = collective_arrivals(job, ranks) if EdgeKind.COLLECTIVE not in without else None
    # ...so the node columns are made once, at their final size (with the collectives' nodes)
    n_all = base + (joins.n_nodes if joins is not None else 0)
    node = {col: np.empty(n_all, dtype) for col, dtype in _NODE_COLUMNS.items()}
    procs, sp, ep, notes = _rank_graphs(job, ranks, node, progress)
    progress(0.65, "linking collectives across ranks")
    if joins is not None:
        arrive_of = collective_joins(job, ranks, node, base, joins, sp)
    else:
        arrive_of = np.full(n_all, -1, np.int32)

    s_src, s_dst, s_lag, s_end, s_kind = sp.arrays()
    e_src, e_dst, e_lag, e_end, e_kind = ep.arrays()
    del sp, ep  # the per-rank pieces: the arrays above hold the same edges
    # The per-rank pieces (edges, the rules' temporaries) were small enough to come from the C heap,
    # which keeps what they freed: give it back before the whole-graph arrays of the next steps.
    release_free_heap()
    if without:
        gone = np.asarray(sorted(int(k) for k in without), np.int8)
        ks = ~np.isin(s_kind, gone)
        s_src, s_dst, s_lag, s_end, s_kind = s_src[ks], s_dst[ks], s_lag[ks], s_end[ks], s_kind[ks]
        ke = ~np.isin(e_kind, gone)
        e_src, e_dst, e_lag, e_end, e_kind = e_src[ke], e_dst[ke], e_lag[ke], e_end[ke], e_kind[ke]
    n_nodes = len(node["dur"])
    # A thread that resumed because another thread's work ended was blocked, not working: its pause
    # is explained by the cross-thread dependency, so its same-thread lag is no CPU time.
    waited = _nodes_reached(n_nodes, s_dst, s_kind == EdgeKind.CPU_CROSS)
    s_lag[(s_kind == EdgeKind.CPU_THREAD) & waited[s_dst]] = 0
    del waited
    anchor = np.full(n_nodes, NO_ANCHOR, np.int64)
    has_pred = _nodes_reached(n_nodes, s_dst)
    anchor[~has_pred] = node["ms"][~has_pred]  # nothing precedes it: it starts when it was measured
    del has_pred
    # GPU work launched before the profiling window waited on things the trace cannot show (its
    # launch, event waits); it starts when it was measured, or later if its stream makes it.
    launched = _nodes_reached(n_nodes, s_dst, s_kind == EdgeKind.LAUNCH)
    typ = node["type"]
    early = ~launched & ((typ == NodeType.GPU) | (typ == NodeType.ARRIVE)) & (arrive_of < 0)
    anchor[early] = node["ms"][early]
    del launched, early

    progress(0.75, "calibrating dependency lags")
    unexplained = 0
    if calibrate:
        s_lag, unexplained = calibrate_start_lags(
            node, s_src, s_dst, s_lag, s_end, anchor, absorb_unexplained
        )
        e_lag = calibrate_end_lags(node, e_src, e_dst, e_lag, e_end)

    progress(0.85, "ordering tasks")
    # make_graph takes the lists over: no name here may keep them alive while it lays them out
    start_deps = Dependencies(s_src, s_dst, s_lag, s_end, s_kind)
    end_deps = Dependencies(e_src, e_dst, e_lag, e_end, e_kind)
    del s_src, s_dst, s_lag, s_end, s_kind, e_src, e_dst, e_lag, e_end, e_kind
    graph = make_graph(
        job,
        origin=GraphOrigin.TRACED,
        rank=node["rank"],
        event=node["event"],
        node_type=node["type"],
        proc=node["proc"],
        dur=node["dur"],
        anchor=anchor,
        start_deps=start_deps,
        end_deps=end_deps,
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


# The rank columns replaying a GPU trace reads after the graph is built (the predicted timeline,
# iterations, breakdowns): their pages stay resident (paging them out would only read them back from
# the file). A CPU-only trace's breakdown also reads parent and depth: a few pages read again.
READ_BY_THE_REPLAY = ("start", "dur", "kind", "name", "lane_begin", "launch", "collectives")

_NODE_COLUMNS = {
    "rank": np.int32,
    "event": np.int32,
    "type": np.int8,
    "proc": np.int32,
    "dur": np.int64,
    "ms": np.int64,  # measured start
    "me": np.int64,  # measured end
}


def _rank_graphs(
    job: Job, ranks: list[RankNodes], node: dict[str, np.ndarray], progress: Progress
) -> tuple[list[tuple[int, int]], EdgeList, EdgeList, list[str]]:
    """Fill the node columns of every rank's tasks and run every per-rank rule: (processors,
    start and end dependencies, notes). Ranks are built on two threads (:mod:`lumos_core.rank_threads`)
    and joined in rank order, so the edges, processors and notes come out as one thread makes them."""
    latency = typical_launch_latency(job)
    release = job.pages_worth_releasing()
    sp = EdgeList()
    ep = EdgeList()
    procs: list[tuple[int, int]] = []
    notes: list[str] = []

    def one(i: int) -> _RankGraph:
        return _rank_graph(job.ranks[i], ranks[i], node, latency, release)

    # closing: a cancelled build (progress raises) stops the threads before the error goes on
    with closing(map_in_order(one, range(len(ranks)))) as built:
        for i, r in enumerate(built):
            progress(0.6 * i / len(job.ranks), f"graph of rank {job.ranks[i].rank}")
            node["proc"][r.nodes] += len(procs)  # the rank's processor ids were numbered from 0
            procs.extend(r.procs)
            sp.extend(r.start_deps)
            ep.extend(r.end_deps)
            notes.extend(r.notes)
    return procs, sp, ep, notes


@dataclass
class _RankGraph:
    """What building one rank's graph gives besides its node columns."""

    nodes: slice  # the rank's task nodes
    procs: list[tuple[int, int]]  # its processors (rank, lane), numbered from 0 in its node columns
    start_deps: EdgeList
    end_deps: EdgeList
    notes: list[str]


def _rank_graph(
    t: RankTrace, rn: RankNodes, node: dict[str, np.ndarray], latency: int, release: bool
) -> _RankGraph:
    """One rank: its slice of the node columns, and every per-rank rule's edges. Runs on a worker
    thread beside other ranks: it writes only its own nodes' slice and its own edge lists."""
    sp = EdgeList()
    ep = EdgeList()
    notes: list[str] = []
    rn.first_leaf_after, rn.last_leaf_within = leaf_maps(t, rn.events, rn.node_of_event)
    mine = slice(rn.base, rn.base + len(rn.events))
    lane_of = t.lane[rn.events]
    lanes_used = np.flatnonzero(np.bincount(lane_of, minlength=len(t.lanes)))  # np.unique, linear
    proc_index = np.full(len(t.lanes), -1, np.int32)
    proc_index[lanes_used] = np.arange(len(lanes_used))
    start = t.start[rn.events]
    dur = t.dur[rn.events]
    node["rank"][mine] = t.rank
    node["event"][mine] = rn.events
    node["type"][mine] = np.where(rn.is_gpu, NodeType.GPU, NodeType.CPU)
    node["proc"][mine] = proc_index[lane_of]
    node["dur"][mine] = dur
    node["ms"][mine] = start
    node["me"][mine] = start + dur
    ctx = RankContext(t, rn, sp, ep, notes, latency)
    for rule in RANK_RULES:
        rule(ctx)
    # only the rules need these per-task and per-event arrays: free them now rather than hold
    # every rank's until the graph is done
    rn.first_leaf_after = rn.last_leaf_within = rn.events = np.zeros(0, np.int32)
    rn.is_gpu = np.zeros(0, bool)
    rn.launches = None
    # The node columns now hold what the graph needs of this rank's events; its mapped cache
    # pages would otherwise stay resident through the replay (a quarter of its peak at 512 ranks),
    # except those the replay reads next.
    if release:
        t.release_pages(keep=READ_BY_THE_REPLAY)
    return _RankGraph(mine, [(t.rank, int(ln)) for ln in lanes_used], sp, ep, notes)


def _nodes_reached(n: int, dst: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """Per node: whether some edge (of those ``where`` selects) ends at it."""
    out = np.zeros(n, bool)
    out[dst if where is None else dst[where]] = True
    return out


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
