"""Each rank's nodes of a graph, found with one sort instead of one scan of every node per rank."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import ExecutionGraph
from lumos_core.graph.order import stable_order_by_node


def nodes_by_rank(graph: ExecutionGraph) -> dict[int, np.ndarray]:
    """rank -> its node ids, ascending (int64), for every rank that has nodes."""
    if graph.n_nodes == 0:
        return {}
    ranks = graph.rank
    lo = int(ranks.min())
    # shifted to start at 0 so the counting sort takes them (a JOIN node may carry rank -1)
    order = stable_order_by_node(int(ranks.max()) - lo + 1, ranks if lo == 0 else ranks - lo)
    sorted_ranks = ranks[order]
    cuts = np.flatnonzero(sorted_ranks[1:] != sorted_ranks[:-1]) + 1
    bounds = np.concatenate(([0], cuts, [len(order)]))
    return {int(sorted_ranks[a]): order[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())}
