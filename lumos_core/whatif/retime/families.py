"""Which family (GEMM, attention, elementwise, ...) each graph node belongs to, which decides the
model that re-times it."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import ExecutionGraph
from lumos_core.trace.kernel_families import GEMM_OPS, Family, classify_names
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, RankTrace
from lumos_core.whatif.retime.rank_nodes import nodes_by_rank

# ATen ops that only make views or read metadata: their cost does not grow with tensor size.
_VIEW_OPS = frozenset(
    {
        "empty",
        "empty_strided",
        "empty_like",
        "view",
        "reshape",
        "_unsafe_view",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "expand",
        "slice",
        "select",
        "squeeze",
        "unsqueeze",
        "split",
        "split_with_sizes",
        "chunk",
        "narrow",
        "detach",
        "detach_",
        "alias",
        "resolve_conj",
        "resolve_neg",
        "item",
        "_local_scalar_dense",
        "is_nonzero",
        "size",
        "stride",
        "contiguous",
        "to",
        "lift_fresh",
        "unbind",
        "flatten",
        "view_as",
        "result_type",
        "set_",
        "record_stream",
        "zeros_like",
        "ones_like",
        "arange",
        "scalar_tensor",
    }
)


def family_of_nodes(
    graph: ExecutionGraph, ranks: dict[int, RankTrace], by_rank: dict[int, np.ndarray] | None = None
) -> np.ndarray:
    """Family per graph node (CPU ops classified by op name, GPU tasks by kernel name).
    ``by_rank``: :func:`~lumos_core.whatif.retime.rank_nodes.nodes_by_rank` of ``graph``, when the
    caller has it."""
    fam = np.full(graph.n_nodes, int(Family.OTHER), np.int16)
    if by_rank is None:
        by_rank = nodes_by_rank(graph)
    empty = np.zeros(0, np.int64)
    for r, t in ranks.items():
        names = classify_names(t.strings)
        cpu_names = cpu_op_families(t.strings)
        mine = by_rank.get(r, empty)
        sel = mine[graph.event[mine] >= 0]
        ev = graph.event[sel]
        gpu = np.isin(t.kind[ev], GPU_ACTIVITY_KINDS)
        fam[sel[gpu]] = names[t.name[ev[gpu]]]
        fam[sel[~gpu]] = cpu_names[t.name[ev[~gpu]]]
    return fam


def cpu_op_families(strings: list[str]) -> np.ndarray:
    out = np.full(len(strings), int(Family.CPU_OP), np.int16)
    for i, s in enumerate(strings):
        low = s.lower()
        if s in GEMM_OPS:
            out[i] = Family.GEMM
        elif "scaled_dot_product" in low or "attention" in low or "flash" in low:
            out[i] = Family.ATTENTION
        elif low.startswith("aten::") and low.split("::", 1)[1] not in _VIEW_OPS:
            out[i] = Family.ELEMENTWISE  # every other ATen op touches its tensors' elements
    return out
