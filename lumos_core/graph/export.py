"""Export an execution graph to networkx (for small graphs: inspection, drawing, graph algorithms)."""

from __future__ import annotations

import networkx as nx
import numpy as np

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType


def to_networkx(graph: ExecutionGraph, max_nodes: int = 200_000) -> nx.DiGraph:
    """A ``networkx.DiGraph``: nodes carry rank, name, type, processor and duration; edges their kind,
    lag and whether they constrain the target's start or (blocking calls) its end."""
    if graph.n_nodes > max_nodes:
        raise ValueError(
            f"the graph is too large for networkx ({graph.n_nodes} nodes > {max_nodes}); "
            "export one rank or raise max_nodes"
        )
    g = nx.DiGraph()
    by_rank = {t.rank: t for t in graph.job.ranks}
    for v in range(graph.n_nodes):
        r, e = int(graph.rank[v]), int(graph.event[v])
        name = by_rank[r].name_of(e) if e >= 0 and r in by_rank else "collective join"
        g.add_node(
            v,
            rank=r,
            name=name,
            type=NodeType(int(graph.node_type[v])).name.lower(),
            proc=int(graph.proc[v]),
            dur_ns=int(graph.dur[v]),
        )
    dst = graph.sp_dst
    for u, v, lag, kind, fe in zip(
        graph.sp_src.tolist(),
        dst.tolist(),
        graph.sp_lag.tolist(),
        graph.sp_kind.tolist(),
        graph.sp_from_end.tolist(),
    ):
        g.add_edge(u, v, kind=EdgeKind(kind).name.lower(), lag_ns=lag, constrains="start", from_end=bool(fe))
    for u, v, lag, kind in zip(
        graph.ep_src.tolist(), graph.ep_dst.tolist(), graph.ep_lag.tolist(), graph.ep_kind.tolist()
    ):
        g.add_edge(u, v, kind=EdgeKind(kind).name.lower(), lag_ns=lag, constrains="end", from_end=True)
    return g


def critical_path_networkx(
    graph: ExecutionGraph, start: np.ndarray, end: np.ndarray
) -> tuple[list[int], int]:
    """Longest path through the replayed schedule with networkx: on the edges that were binding
    (the target started, or a blocking call ended, exactly when the edge allowed), weighted by the
    time they span. Returns (nodes, length in ns from the path's first start to its last end)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.n_nodes))
    dst = graph.sp_dst
    for u, v, lag, fe in zip(
        graph.sp_src.tolist(), dst.tolist(), graph.sp_lag.tolist(), graph.sp_from_end.tolist()
    ):
        ref = end[u] if fe else start[u]
        if ref + lag == start[v]:
            g.add_edge(u, v, weight=int(end[v] - end[u]))
    for u, v, lag, fe in zip(
        graph.ep_src.tolist(), graph.ep_dst.tolist(), graph.ep_lag.tolist(), graph.ep_from_end.tolist()
    ):
        ref = end[u] if fe else start[u]
        if ref + lag == end[v]:
            g.add_edge(u, v, weight=int(end[v] - end[u]))
    last = int(np.argmax(end))
    sub = g.subgraph(nx.ancestors(g, last) | {last})
    path = nx.dag_longest_path(sub, weight="weight")
    if not path or path[-1] != last:
        path = [*path, last] if path and sub.has_edge(path[-1], last) else [last]
    return path, int(end[path[-1]] - start[path[0]])
