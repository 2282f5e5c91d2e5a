"""``COLLECTIVE`` and ``P2P``: the ranks of a collective (or send/recv) instance joined through
arrive -> join -> transfer nodes. Unlike the per-rank rules this adds nodes, so it runs once every
rank's tasks exist."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.edge_list import EdgeList
from lumos_core.graph.model import EdgeKind, NodeType
from lumos_core.graph.nodes import RankNodes
from lumos_core.trace.collectives import CollectiveMatch
from lumos_core.trace.model import CollectiveKind, Job


def collective_joins(
    job: Job,
    ranks: list[RankNodes],
    node: dict[str, np.ndarray],
    arrive_of: np.ndarray,
    sp: EdgeList,
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
    redirect_sources(sp, arrive, xfer_ids)
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
    # the event's task node is now the transfer node (each rank's transfers found by one sort, not
    # by a scan of every transfer per rank)
    xfer_rank = np.asarray(new["rank"][xfer_ids])
    by_rank_order = np.argsort(xfer_rank, kind="stable")
    sorted_rank = xfer_rank[by_rank_order]
    for rn in ranks:
        a, b = np.searchsorted(sorted_rank, [rn.rank.rank, rn.rank.rank + 1])
        mine = xfer_ids[by_rank_order[a:b]]
        rn.node_of_event[new["event"][mine]] = mine
    return new, arrive_all


def redirect_sources(sp: EdgeList, old: np.ndarray, new: np.ndarray) -> None:
    """Edges leaving ``old[i]`` leave ``new[i]`` instead (except the arrive node's own inputs).

    A node id -> new id table (node ids are dense) makes each edge one lookup; a node given twice
    maps to its last new id."""
    old = np.asarray(old, np.int64)
    if len(old) == 0:
        return
    top = max(int(old.max()), max((int(src.max()) for src in sp.src if len(src)), default=-1)) + 1
    remap = np.full(top, -1, np.int64)
    keys, last = np.unique(old[::-1], return_index=True)
    remap[keys] = np.asarray(new, np.int64)[::-1][last]
    for i, src in enumerate(sp.src):
        to = remap[np.maximum(src, 0)]
        hit = (to >= 0) & (src >= 0)
        if hit.any():
            s = src.copy()
            s[hit] = to[hit]
            sp.src[i] = s
