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
    pieces: dict[str, list[np.ndarray]],
    sp: EdgeList,
    notes: list[str],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Turn every complete collective instance into arrive -> join -> transfer.

    Each participant's kernel node becomes its ARRIVE node (it keeps the kernel's dependencies; its
    start is when this rank is ready). A JOIN node starts at the latest arrival. A new transfer node
    per participant starts at the join and lasts that rank's measured transfer time (its kernel end
    minus the instance's latest start), so waiting for peers is separated from moving data.

    ``pieces``: each node column as one array per rank (in ``ranks`` order), used up here. Returns
    the whole columns, the new nodes after the ranks' tasks (each column is put together once), and
    each transfer node's ARRIVE node (-1 for every other node).
    """
    arrivals = _arrivals(job, ranks)
    if arrivals is None:
        node = concatenate_pieces(pieces)
        return node, np.full(len(node["dur"]), -1, np.int32)
    inst, arrive, segments = arrivals
    kind = job.collective_match.kind  # type: ignore[union-attr]
    uniq, k = np.unique(inst, return_inverse=True)
    n0 = sum(len(p) for p in pieces["dur"])
    n_join = len(uniq)
    n_part = len(arrive)
    join_ids = n0 + np.arange(n_join)
    xfer_ids = n0 + n_join + np.arange(n_part)

    def of_arrivals(col: str) -> np.ndarray:
        """The arriving kernels' values of a column, read from their rank's piece."""
        return np.concatenate([pieces[col][i][local] for i, local in segments])

    arrive_ms, arrive_me = of_arrivals("ms"), of_arrivals("me")
    latest_start = np.full(n_join, np.iinfo(np.int64).min)
    np.maximum.at(latest_start, k, arrive_ms)
    transfer = np.maximum(arrive_me - latest_start[k], 0)
    # The transfer node takes over the kernel's place: its successors must follow the transfer.
    redirect_sources(sp, arrive, xfer_ids)
    p2p = np.isin(kind[uniq], [CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV])
    kind_join = np.where(p2p[k], EdgeKind.P2P, EdgeKind.COLLECTIVE)
    for kd in (EdgeKind.COLLECTIVE, EdgeKind.P2P):
        sel = kind_join == kd
        sp.add(arrive[sel], join_ids[k[sel]], 0, True, kd)
        sp.add(join_ids[k[sel]], xfer_ids[sel], 0, False, kd)
    xfer_rank, xfer_event, xfer_proc = of_arrivals("rank"), of_arrivals("event"), of_arrivals("proc")
    pieces["rank"] += [np.full(n_join, -1, np.int32), xfer_rank]
    pieces["event"] += [np.full(n_join, -1, np.int32), xfer_event]
    pieces["type"] += [np.full(n_join, NodeType.JOIN, np.int8), np.full(n_part, NodeType.GPU, np.int8)]
    pieces["proc"] += [np.full(n_join, -1, np.int32), xfer_proc]
    pieces["dur"] += [np.zeros(n_join, np.int64), transfer]
    pieces["ms"] += [latest_start, latest_start[k]]
    pieces["me"] += [latest_start, arrive_me]
    new = concatenate_pieces(pieces)
    new["type"][arrive] = NodeType.ARRIVE
    new["dur"][arrive] = 0
    new["me"][arrive] = arrive_ms
    arrive_of = np.full(len(new["dur"]), -1, np.int32)
    arrive_of[xfer_ids] = arrive
    # the event's task node is now the transfer node (each rank's transfers found by one sort, not
    # by a scan of every transfer per rank)
    by_rank_order = np.argsort(xfer_rank, kind="stable")
    sorted_rank = xfer_rank[by_rank_order]
    for rn in ranks:
        lo, hi = np.searchsorted(sorted_rank, [rn.rank.rank, rn.rank.rank + 1])
        mine = by_rank_order[lo:hi]
        rn.node_of_event[xfer_event[mine]] = xfer_ids[mine]
    return new, arrive_of


def _arrivals(
    job: Job, ranks: list[RankNodes]
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, np.ndarray]]] | None:
    """The participants of every complete instance with two or more members whose kernel is a
    task, rank by rank: (instance, kernel node, and per rank that has some, its index in ``ranks``
    and its participants' nodes counted from the rank's first); None when there is none."""
    match: CollectiveMatch | None = job.collective_match
    if match is None or match.n_instances == 0:
        return None
    where = {rn.rank.rank: i for i, rn in enumerate(ranks)}
    complete = match.complete & (match.members >= 2)
    part_inst, part_node = [], []
    segments: list[tuple[int, np.ndarray]] = []
    for r, inst in match.instance.items():
        i = where.get(r)
        if i is None or len(inst) == 0:
            continue
        rn = ranks[i]
        ok = inst >= 0
        ok[ok] = complete[inst[ok]]
        nodes = rn.node_of_event[rn.rank.collectives.event[ok]]
        good = nodes >= 0
        part_inst.append(inst[ok][good])
        part_node.append(nodes[good])
        if good.any():
            segments.append((i, nodes[good] - rn.base))
    if not segments:
        return None
    return np.concatenate(part_inst), np.concatenate(part_node), segments


def concatenate_pieces(pieces: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each column's per-rank pieces as one array; the pieces go as soon as their column is whole."""
    return {col: np.concatenate(pieces.pop(col)) for col in list(pieces)}


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
