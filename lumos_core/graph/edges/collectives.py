"""``COLLECTIVE`` and ``P2P``: the ranks of a collective (or send/recv) instance joined through
arrive -> join -> transfer nodes. Unlike the per-rank rules this adds nodes, so it runs once every
rank's tasks exist."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.graph.edges.edge_list import EdgeList
from lumos_core.graph.model import EdgeKind, NodeType
from lumos_core.graph.nodes import RankNodes
from lumos_core.trace.collectives import CollectiveMatch
from lumos_core.trace.model import CollectiveKind, Job


@dataclass
class Joins:
    """The collective instances to join: per participant (a kernel node) its instance, numbered
    0..n_joins-1 in instance order (``instance``), and the instance ids."""

    instances: np.ndarray
    instance: np.ndarray
    arrive: np.ndarray

    @property
    def n_nodes(self) -> int:
        """Nodes the joins add: one join per instance and one transfer per participant."""
        return len(self.instances) + len(self.arrive)


def collective_arrivals(job: Job, ranks: list[RankNodes]) -> Joins | None:
    """The participants of every complete instance with two or more members whose kernel is a
    task, rank by rank; None when there is none."""
    match: CollectiveMatch | None = job.collective_match
    if match is None or match.n_instances == 0:
        return None
    by_rank = {rn.rank.rank: rn for rn in ranks}
    complete = match.complete & (match.members >= 2)
    part_inst, part_node = [], []
    for r, inst in match.instance.items():
        rn = by_rank.get(r)
        if rn is None or len(inst) == 0:
            continue
        ok = inst >= 0
        ok[ok] = complete[inst[ok]]
        nodes = rn.node_of_event[rn.rank.collectives.event[ok]]
        good = nodes >= 0
        part_inst.append(inst[ok][good])
        part_node.append(nodes[good])
    if not part_inst:
        return None
    inst = np.concatenate(part_inst)
    if len(inst) == 0:
        return None
    uniq, k = np.unique(inst, return_inverse=True)
    return Joins(uniq, k, np.concatenate(part_node))


def collective_joins(
    job: Job, ranks: list[RankNodes], node: dict[str, np.ndarray], n0: int, joins: Joins, sp: EdgeList
) -> np.ndarray:
    """Turn every instance of ``joins`` into arrive -> join -> transfer.

    Each participant's kernel node becomes its ARRIVE node (it keeps the kernel's dependencies; its
    start is when this rank is ready). A JOIN node starts at the latest arrival. A new transfer node
    per participant starts at the join and lasts that rank's measured transfer time (its kernel end
    minus the instance's latest start), so waiting for peers is separated from moving data.

    ``node``: the node columns, the ranks' tasks filled in up to ``n0``; the joins then the
    transfers are written after them (the columns were sized for them: ``joins.n_nodes``). Returns
    each transfer node's ARRIVE node (-1 for every other node).
    """
    uniq, k, arrive = joins.instances, joins.instance, joins.arrive
    n_join = len(uniq)
    n_part = len(arrive)
    joined = slice(n0, n0 + n_join)
    join_ids = n0 + np.arange(n_join)
    xfer_ids = n0 + n_join + np.arange(n_part)
    ms, me = node["ms"], node["me"]
    arrive_ms, arrive_me = ms[arrive], me[arrive]
    latest_start = np.full(n_join, np.iinfo(np.int64).min)
    np.maximum.at(latest_start, k, arrive_ms)
    transfer = np.maximum(arrive_me - latest_start[k], 0)
    # The transfer node takes over the kernel's place: its successors must follow the transfer.
    redirect_sources(sp, arrive, xfer_ids)
    kind = job.collective_match.kind  # type: ignore[union-attr]
    p2p = np.isin(kind[uniq], [CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV])
    kind_join = np.where(p2p[k], EdgeKind.P2P, EdgeKind.COLLECTIVE)
    for kd in (EdgeKind.COLLECTIVE, EdgeKind.P2P):
        sel = kind_join == kd
        sp.add(arrive[sel], join_ids[k[sel]], 0, True, kd)
        sp.add(join_ids[k[sel]], xfer_ids[sel], 0, False, kd)
    for col in ("rank", "event", "proc"):
        node[col][joined] = -1
        node[col][xfer_ids] = node[col][arrive]
    node["type"][joined] = NodeType.JOIN
    node["type"][xfer_ids] = NodeType.GPU
    node["dur"][joined] = 0
    node["dur"][xfer_ids] = transfer
    ms[joined] = latest_start
    ms[xfer_ids] = latest_start[k]
    me[joined] = latest_start
    me[xfer_ids] = arrive_me
    node["type"][arrive] = NodeType.ARRIVE
    node["dur"][arrive] = 0
    me[arrive] = arrive_ms
    arrive_of = np.full(len(ms), -1, np.int32)
    arrive_of[xfer_ids] = arrive
    # the event's task node is now the transfer node (each rank's transfers found by one sort, not
    # by a scan of every transfer per rank)
    xfer_rank = node["rank"][xfer_ids]
    xfer_event = node["event"][xfer_ids]
    by_rank_order = np.argsort(xfer_rank, kind="stable")
    sorted_rank = xfer_rank[by_rank_order]
    for rn in ranks:
        lo, hi = np.searchsorted(sorted_rank, [rn.rank.rank, rn.rank.rank + 1])
        mine = by_rank_order[lo:hi]
        rn.node_of_event[xfer_event[mine]] = xfer_ids[mine]
    return arrive_of


def redirect_sources(sp: EdgeList, old: np.ndarray, new: np.ndarray) -> None:
    """Edges leaving ``old[i]`` leave ``new[i]`` instead (except the arrive node's own inputs).

    A node id -> new id table (node ids are dense) makes each edge one lookup; a node given twice
    maps to its last new id."""
    old = np.asarray(old, np.int64)
    if len(old) == 0:
        return
    top = max(int(old.max()), max((int(src.max()) for src in sp.src if len(src)), default=-1)) + 1
    remap = np.full(top, -1, np.int32)  # node ids are int32 in the graph
    keys, last = np.unique(old[::-1], return_index=True)
    remap[keys] = np.asarray(new, np.int64)[::-1][last]
    for i, src in enumerate(sp.src):
        to = remap[np.maximum(src, 0)]
        hit = (to >= 0) & (src >= 0)
        if hit.any():
            s = src.copy()
            s[hit] = to[hit]
            sp.src[i] = s
