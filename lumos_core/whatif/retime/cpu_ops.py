"""CPU-only traces: operators do their work between and after their children, so an operator's
tasks and its share of the CPU time between tasks scale together."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import RankTrace
from lumos_core.whatif.baseline import gemm_shape
from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.families import cpu_op_families
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.ratios import dims_ratio, gemm_flop_ratio, safe_ratio, value_map


def retime_cpu_ops(ctx: RetimeContext, plan: RetimePlan) -> None:
    """CPU-only traces: the operators themselves do the work (between and after their children), so
    each operator's tasks and its share of the CPU time between tasks scale together."""
    graph, ranks, base, config, profile = ctx.graph, ctx.ranks, ctx.base, ctx.config, ctx.profile
    sizes, tok_ratio, h_ratio = ctx.sizes, ctx.tok_ratio, ctx.h_ratio
    mb_ratio = safe_ratio(config.micro_batch, base.micro_batch)
    seq_ratio = safe_ratio(config.seq, base.seq)
    values = value_map(base, config)
    rules: dict[int, tuple[str, str]] = {}

    def op_ratio(r: int, op: int, fam: Family) -> float:
        t = ranks[r]
        if fam == Family.GEMM:
            shape = gemm_shape(t.name_of(op), t.args_of(op).get("Input Dims"))
            if shape:
                fr = gemm_flop_ratio(shape, sizes, tok_ratio)
                flops = 2.0 * shape[0] * shape[1] * shape[2]
                pr = profile.gemm_time_ratio(flops, flops * fr) if profile is not None else None
                if pr is not None:
                    rules[op] = (
                        "GEMM (CPU)",
                        "FLOPs of the recorded shape at the profile's rate for its class",
                    )
                    return pr
                rules[op] = ("GEMM (CPU)", "FLOPs of the recorded shape")
                return fr
            rules[op] = ("GEMM (CPU, no recorded shape)", "tokens x hidden^2")
            return tok_ratio * h_ratio * h_ratio
        if fam == Family.ATTENTION:
            rules[op] = ("attention (CPU)", "FLOPs ∝ micro-batch · seq² · hidden")
            return mb_ratio * seq_ratio * seq_ratio * h_ratio
        r = dims_ratio(t.args_of(op).get("Input Dims"), values)
        if r is not None:
            rules[op] = ("elementwise / norm (CPU)", "bytes of its recorded input shape")
            return r
        rules[op] = ("elementwise / norm (CPU)", "bytes ∝ tokens · hidden")
        return tok_ratio * h_ratio

    node_ratio, edge_ratio, node_op = cpu_op_ratios(graph, ranks, op_ratio)
    by_rule: dict[tuple[str, str], list[int]] = {}
    for v in np.flatnonzero(node_op >= 0).tolist():
        by_rule.setdefault(rules.get(int(node_op[v]), ("CPU operator", "")), []).append(v)
    for (what, model), nodes in by_rule.items():
        idx = np.asarray(nodes)
        plan.apply(idx, node_ratio[idx], what, model, "and the CPU time between its children")
    plan.lag_ratio = edge_ratio


def _effective_ops(t: RankTrace, retimable: np.ndarray) -> np.ndarray:
    """Per event: itself if re-timable, else its nearest re-timable ancestor, else -1."""
    eff = np.where(retimable[t.name], np.arange(len(t)), -1)
    # Parents come before their children in lane order; a few passes settle every nesting level.
    for _ in range(int(t.depth.max()) + 1 if len(t) else 0):
        todo = (eff < 0) & (t.parent >= 0)
        if not todo.any():
            break
        eff[todo] = eff[t.parent[todo]]
    return eff


def _innermost_containing(t: RankTrace, a: int, b: int) -> int:
    """The innermost event on a's lane that contains the middle of the gap between a and b."""
    mid = (int(t.start[a] + t.dur[a]) + int(t.start[b])) // 2
    p = a
    while p >= 0 and int(t.start[p] + t.dur[p]) <= mid:
        p = int(t.parent[p])
    q = b
    while q >= 0 and int(t.start[q]) > mid:
        q = int(t.parent[q])
    if p < 0:
        return q
    if q < 0:
        return p
    return p if t.depth[p] >= t.depth[q] else q


def cpu_op_ratios(
    graph: ExecutionGraph, ranks: dict[int, RankTrace], op_ratio
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a CPU-only trace, where operators do their work between their children: per node and per
    same-thread edge (the CPU time before a task), the ratio of the operator that time belongs to.

    ``op_ratio(rank, event, family) -> (ratio, rule key)`` rates one operator. Returns node ratios,
    edge ratios and, per node, the operator event behind its ratio (-1: none)."""
    node_ratio = np.ones(graph.n_nodes)
    node_op = np.full(graph.n_nodes, -1, np.int64)
    edge_ratio = np.ones(len(graph.sp_src))
    cache: dict[tuple[int, int], float] = {}
    fams = {r: cpu_op_families(t.strings) for r, t in ranks.items()}
    retimable = {r: np.isin(f, [Family.GEMM, Family.ATTENTION, Family.ELEMENTWISE]) for r, f in fams.items()}
    eff = {r: _effective_ops(t, retimable[r]) for r, t in ranks.items()}

    def ratio_of(r: int, op: int) -> float:
        key = (r, op)
        if key not in cache:
            cache[key] = op_ratio(r, op, Family(int(fams[r][int(ranks[r].name[op])])))
        return cache[key]

    cpu = np.flatnonzero((graph.node_type == NodeType.CPU) & (graph.event >= 0))
    for v in cpu.tolist():
        r, e = int(graph.rank[v]), int(graph.event[v])
        op = int(eff[r][e])
        if op >= 0:
            node_ratio[v] = ratio_of(r, op)
            node_op[v] = op
    dst = graph.sp_dst
    same = np.flatnonzero(
        (graph.sp_kind == EdgeKind.CPU_THREAD)
        & (graph.event[graph.sp_src] >= 0)
        & (graph.event[dst] >= 0)
        & (graph.rank[graph.sp_src] == graph.rank[dst])
    )
    for j in same.tolist():
        u, v = int(graph.sp_src[j]), int(dst[j])
        r = int(graph.rank[u])
        t = ranks[r]
        a, b = int(graph.event[u]), int(graph.event[v])
        if t.lane[a] != t.lane[b] or graph.sp_lag[j] <= 0:
            continue
        owner = _innermost_containing(t, a, b)
        op = int(eff[r][owner]) if owner >= 0 else -1
        if op >= 0:
            edge_ratio[j] = ratio_of(r, op)
    return node_ratio, edge_ratio, node_op
