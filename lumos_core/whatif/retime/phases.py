"""Each graph node's place in the training step (phase, layer, microbatch, iteration), for the rules
that re-time parts of a layer (recomputation, sequence and context parallelism).

Every iteration of every rank is segmented (:func:`~lumos_core.whatif.segments.segment_rank`); a
node takes the label of the traced event it stands for, so the copies a graph rewrite makes of a
template carry its labels too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.errors import ConfigError
from lumos_core.graph.model import ExecutionGraph
from lumos_core.trace.model import RankTrace
from lumos_core.whatif.segments import Phase, segment_rank

# the phases whose work is per microbatch (and scales with its tokens)
PER_MICROBATCH = (Phase.PRE_F, Phase.F, Phase.MID, Phase.B, Phase.POST_B)


@dataclass
class NodeLabels:
    """Per node: phase (int8 :class:`Phase`, -1 outside any iteration), layer, microbatch, iteration."""

    phase: np.ndarray
    layer: np.ndarray
    mb: np.ndarray
    iteration: np.ndarray

    def layer_key(self, rank: np.ndarray) -> np.ndarray:
        """One integer per (rank, iteration, layer): a layer's passes of every microbatch."""
        r = rank.astype(np.int64) + 1
        return (r * 1024 + self.iteration + 1) * 65536 + self.layer + 1

    def group_key(self, rank: np.ndarray) -> np.ndarray:
        """One integer per (rank, iteration, layer, microbatch): a layer pass of one microbatch."""
        r = rank.astype(np.int64) + 1
        return ((r * 1024 + self.iteration + 1) * 65536 + self.layer + 1) * 65536 + self.mb + 1


def label_nodes(graph: ExecutionGraph, ranks: dict[int, RankTrace]) -> tuple[NodeLabels | None, str]:
    """The labels of every node of ``graph``, or (None, why) when a rank's layers cannot be found."""
    n = graph.n_nodes
    out = NodeLabels(
        np.full(n, -1, np.int8), np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    )
    for r, t in ranks.items():
        mine = np.flatnonzero((graph.rank == r) & (graph.event >= 0))
        if len(mine) == 0:
            continue
        ph = np.full(len(t), -1, np.int8)
        lay = np.full(len(t), -1, np.int64)
        mb = np.full(len(t), -1, np.int64)
        it = np.full(len(t), -1, np.int64)
        for k in range(len(t.iterations)):
            try:
                seg = segment_rank(t, k)
            except ConfigError as exc:
                return None, str(exc)
            sel = (seg.phase >= 0) & (ph < 0)
            ph[sel], lay[sel], mb[sel], it[sel] = seg.phase[sel], seg.layer[sel], seg.mb[sel], k
        ev = graph.event[mine]
        out.phase[mine], out.layer[mine], out.mb[mine], out.iteration[mine] = ph[ev], lay[ev], mb[ev], it[ev]
    return out, ""
