"""Collectives for new group sizes, message sizes, node layouts and links: the NCCL model of
:mod:`lumos_core.perf.nccl`, calibrated on the trace's own collectives."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import orjson

from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.graph.order import stable_order_by_node
from lumos_core.perf.hardware import GpuProfile
from lumos_core.perf.nccl import (
    CollectiveSample,
    GroupShape,
    NcclModel,
    Prediction,
    shape_of_ranks,
    shape_of_strided_group,
)
from lumos_core.trace.model import CollectiveKind, Job
from lumos_core.whatif.baseline import group_roles
from lumos_core.whatif.config import JobConfig
from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.rank_nodes import nodes_by_rank
from lumos_core.whatif.retime.ratios import collective_ratio, layer_gemm_flops
from lumos_core.whatif.row_groups import group_ids, seen_before

_MAX_SAMPLES = 400


def trace_gpus_per_node(job: Job, gpu: GpuProfile) -> int:
    """GPUs per node of the traced job: the profile's node size, or the whole job when it is smaller
    (an 8-GPU trace ran on one node). The job's recorded world size, not the ranks loaded: with one
    rank of eight loaded, its 8-rank groups still ran on one node (taking 1 made them 8 nodes, and
    an estimate with no knob changed re-timed every DP collective as intra- instead of inter-node)."""
    world = job.world_size if job.ranks else 0
    return max(1, min(gpu.gpus_per_node, world or gpu.gpus_per_node))


def collective_samples(job: Job, graph: ExecutionGraph, gpus_per_node: int) -> list[CollectiveSample]:
    """One sample per collective instance (transfer time = the joined transfer node, i.e. the shortest
    kernel of the instance across ranks), its group placed on nodes from the recorded group ranks
    (node = rank // gpus_per_node), else packed. Past the first ``_MAX_SAMPLES`` samples, each (kind,
    size, nodes) keeps at most 8."""
    by_rank = {t.rank: t for t in job.ranks}
    transfer = np.flatnonzero(graph.arrive_of >= 0)
    t_rank = graph.rank[transfer]
    t_event = graph.event[transfer]
    # per transfer node: its rank's first collective row for the event, message size, group size
    # and group-ranks string (columns filled rank by rank, kept in node order)
    row = np.full(len(transfer), -1, np.int64)
    size = np.zeros(len(transfer), np.int64)
    n = np.zeros(len(transfer), np.int64)
    gid = np.full(len(transfer), -1, np.int64)
    kind = np.zeros(len(transfer), np.int64)
    for r in np.unique(t_rank).tolist():
        t = by_rank[r]
        c = t.collectives
        at = np.flatnonzero(t_rank == r)
        e = t_event[at].astype(np.int64)
        rows_of = np.full(len(t), -1, np.int64)
        rows_of[c.event[::-1]] = np.arange(len(c))[::-1]  # the last write wins: the first row
        ok = (e >= 0) & (e < len(t))
        rr = np.where(ok, rows_of[np.where(ok, e, 0)] if len(t) else -1, -1)
        row[at] = rr
        has = rr >= 0
        got = at[has]
        sel = rr[has]
        size[got] = c.size_bytes[sel]
        n[got] = c.group_size[sel]
        gid[got] = c.group_ranks[sel]
        kind[got] = c.kind[sel]
    valid = np.flatnonzero((row >= 0) & (size > 0) & (n > 1))
    shapes: dict[tuple[int, int], GroupShape] = {}
    by_text: dict[tuple[str | None, int], GroupShape] = {}
    nodes_of = np.zeros(len(valid), np.int64)
    shape_of: list[GroupShape] = []
    for i, (r, g, k) in enumerate(zip(t_rank[valid].tolist(), gid[valid].tolist(), n[valid].tolist())):
        key_shape = (r, g)
        if key_shape not in shapes:
            text = by_rank[r].strings[g] if g >= 0 else None
            if (text, k) not in by_text:
                by_text[(text, k)] = _shape_of(text, k, gpus_per_node)
            shapes[key_shape] = by_text[(text, k)]
        shape_of.append(shapes[key_shape])
        nodes_of[i] = shapes[key_shape].nodes
    # the i-th sample is kept while fewer than _MAX_SAMPLES + 1 were kept before it (so the first
    # _MAX_SAMPLES + 1 always are), and after that only while its (kind, size, nodes) has not yet
    # been seen 8 times
    ids, first = group_ids(kind[valid], size[valid], nodes_of)
    keep = (np.arange(len(valid)) <= _MAX_SAMPLES) | (seen_before(ids, len(first)) < 8)
    samples: list[CollectiveSample] = []
    for i in np.flatnonzero(keep).tolist():
        j = int(valid[i])
        v = int(transfer[j])
        samples.append(
            CollectiveSample(CollectiveKind(int(kind[j])), int(size[j]), shape_of[i], graph.dur[v] / 1e9)
        )
    return samples


def _shape_of(ranks_text: str | None, n: int, gpus_per_node: int) -> GroupShape:
    if ranks_text:
        try:
            ranks = orjson.loads(ranks_text)
            if isinstance(ranks, list) and len(ranks) == n and all(isinstance(x, int) for x in ranks):
                return shape_of_ranks(ranks, gpus_per_node)
        except orjson.JSONDecodeError:
            pass
    return GroupShape.spread(n, gpus_per_node)


def comm_model_from_trace(job: Job, graph: ExecutionGraph, gpu: GpuProfile) -> NcclModel:
    """The NCCL model of the traced system, calibrated per scope (intra-/inter-node) on the trace's
    collectives; a scope without samples keeps the GPU profile's numbers."""
    gpn = trace_gpus_per_node(job, gpu)
    model = NcclModel.for_gpu(gpu, gpus_per_node=gpu.gpus_per_node)
    return model.calibrate(collective_samples(job, graph, gpn))


def model_for(model: NcclModel, gpu: GpuProfile) -> NcclModel:
    """The calibrated model moved to another system (new GPU or links): the new line rates with the
    corrections fitted on the trace (how far this software stack is from the ceilings)."""
    fresh = NcclModel.for_gpu(gpu).params
    p = model.params
    if (fresh.gpu, fresh.nvlink_gbps, fresh.network_gbps, fresh.gpus_per_node) == (
        p.gpu,
        p.nvlink_gbps,
        p.network_gbps,
        p.gpus_per_node,
    ):
        return model
    kept = {
        f: getattr(p, f)
        for f in (
            "latency_scale_intra",
            "bandwidth_scale_intra",
            "latency_scale_inter",
            "bandwidth_scale_inter",
            "source_intra",
            "source_inter",
        )
    }
    return dataclasses.replace(
        model, params=dataclasses.replace(fresh, **kept), kernel_floor=gpu.kernel_floor
    )


def retime_collectives(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Every collective of the graph at its new group size, message size, node layout and links."""
    job, graph, baseline, config, model = ctx.job, ctx.graph, ctx.baseline, ctx.config, ctx.model
    gpu_old, gpu_new, tok_ratio, h_ratio = ctx.gpu_old, ctx.gpu_new, ctx.tok_ratio, ctx.h_ratio
    nodes_of_rank = ctx.by_rank
    base = baseline.config
    roles, _ = group_roles(job)
    # Context parallelism (Megatron's order tp-cp-dp-pp): gradients are reduced over DP x CP ranks.
    dp_new, dp_old = config.dp * config.cp, base.dp * base.cp
    new_size = {"dp": dp_new, "tp": config.tp, "pp": config.pp, "cp": config.cp, "world": config.world_size}
    old_size = {"dp": dp_old, "tp": base.tp, "pp": base.pp, "cp": base.cp, "world": base.world_size}
    stride_new = {"tp": 1, "dp": config.tp, "pp": config.tp * dp_new, "cp": config.tp, "world": 1}
    stride_old = {"tp": 1, "dp": base.tp, "pp": base.tp * dp_old, "cp": base.tp, "world": 1}
    # Gradient/parameter buffers scale with the parameters a rank holds: layer shape, layers per
    # stage, TP shard. Activations (TP and PP traffic) scale with tokens and hidden.
    params_ratio = 1.0
    if base.hidden and base.ffn:
        params_ratio = layer_gemm_flops(
            config.hidden or base.hidden, config.ffn or base.ffn
        ) / layer_gemm_flops(base.hidden, base.ffn)
    params_ratio *= (base.tp / config.tp) * (base.pp / config.pp)
    if config.layers and base.layers:
        params_ratio *= config.layers / base.layers
    act_ratio = tok_ratio * h_ratio
    if config.cp != base.cp:  # a rank's activations hold seq / CP tokens
        act_ratio *= base.cp / config.cp
    gpn_old, gpn_new = trace_gpus_per_node(job, gpu_old), gpu_new.gpus_per_node
    model_new = model_for(model, gpu_new)
    groups = collective_groups(job, graph, roles, base, nodes_of_rank)
    if base.tp == 1 and base.pp == 1:  # the whole world is the data-parallel group
        groups = {
            ("dp" if role == "world" and k != CollectiveKind.ALL_TO_ALL else role, k, s): v
            for (role, k, s), v in groups.items()
        }
    for (role, kind, size), nodes in groups.items():
        n_old = old_size.get(role, 1) if role != "world" else base.world_size
        n_new = new_size.get(role, 1) if role != "world" else config.world_size
        size_ratio = params_ratio if role in ("dp", "world") else act_ratio
        if role == "pp" or kind == CollectiveKind.ALL_TO_ALL:
            # activations: what each rank exchanges follows its own tokens, not the parameters
            size_ratio = act_ratio
        shape_old = shape_of_strided_group(n_old, stride_old.get(role, 1), gpn_old)
        shape_new = shape_of_strided_group(n_new, stride_new.get(role, 1), gpn_new)
        if (shape_old, size_ratio) == (shape_new, 1.0) and model_new is model:
            continue
        if size > 0:
            r, pred = collective_ratio(kind, size, shape_old, shape_new, size_ratio, model, model_new)
        else:
            r, pred = _ratio_of_unsized(
                graph, nodes, kind, shape_old, shape_new, size_ratio, model, model_new
            )
        scope = "inter-node" if shape_new.inter_node else "intra-node"
        how = f"NCCL {pred.algorithm}/{pred.protocol}" if pred else "NCCL"
        label = CollectiveKind(kind).label
        plan.apply(
            np.asarray(nodes),
            r,
            f"{'all-rank' if role == 'world' else role.upper()} {label}",
            f"{how}, {scope} ({model_new.source(inter_node=shape_new.inter_node)})",
            f"group {n_old} -> {n_new} on {shape_new.nodes} node(s)"
            + (f", message x{size_ratio:.3g}" if size_ratio != 1 else ""),
        )


_ROLES = ("dp", "tp", "pp", "world", "cp")  # what group_roles assigns


def collective_groups(
    job: Job,
    graph: ExecutionGraph,
    roles: dict[str, str],
    base: JobConfig,
    nodes_of_rank: dict[int, np.ndarray] | None = None,
) -> dict[tuple[str, int, int], np.ndarray]:
    """The graph's collective kernels (ARRIVE halves left out) grouped by (role of their group,
    kind, message bytes): keys in order of first appearance (ranks in job order, nodes ascending),
    each group's nodes in that order too."""
    if nodes_of_rank is None:
        nodes_of_rank = nodes_by_rank(graph)
    empty = np.zeros(0, np.int64)
    code = {r: i for i, r in enumerate(_ROLES)}
    no_pg = code["dp" if base.tp == base.pp == 1 else "world"]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for t in job.ranks:
        c = t.collectives
        if len(c) == 0:
            continue
        row_of = np.full(len(t), -1, np.int64)
        row_of[c.event] = np.arange(len(c))
        mine = nodes_of_rank.get(t.rank, empty)
        sel = mine[(graph.event[mine] >= 0) & (graph.node_type[mine] != NodeType.ARRIVE)]
        rows = row_of[graph.event[sel]]
        has = rows >= 0
        nodes, rows = sel[has], rows[has]
        kind = c.kind[rows].astype(np.int64)
        pg = c.pg[rows]
        a2a = kind == CollectiveKind.ALL_TO_ALL
        role = np.empty(len(rows), np.int64)
        for g in np.unique(pg).tolist():
            on = pg == g
            # All-to-all is not a gradient collective (embedding / expert exchange): its group is
            # the one recorded, else every rank.
            name = t.strings[g] if g >= 0 else None
            role[on & a2a] = code[roles.get(name, "world")] if name is not None else code["world"]
            role[on & ~a2a] = code[roles.get(name, "dp")] if name is not None else no_pg
        parts.append((role, kind, c.size_bytes[rows].astype(np.int64), nodes))
    if not parts:
        return {}
    role, kind, size, nodes = (np.concatenate(x) for x in zip(*parts))
    ids, first = group_ids(role, kind, size)
    members = stable_order_by_node(len(first), ids)  # each group's nodes together, in order
    cuts = np.concatenate(([0], np.cumsum(np.bincount(ids, minlength=len(first)))))
    groups: dict[tuple[str, int, int], np.ndarray] = {}
    for g, i in enumerate(first.tolist()):
        groups[(_ROLES[role[i]], int(kind[i]), int(size[i]))] = nodes[members[cuts[g] : cuts[g + 1]]]
    return groups


def _ratio_of_unsized(
    graph: ExecutionGraph,
    nodes: np.ndarray,
    kind: int,
    shape_old: GroupShape,
    shape_new: GroupShape,
    size_ratio: float,
    model: NcclModel,
    model_new: NcclModel,
) -> tuple[np.ndarray, Prediction | None]:
    """Collectives without a recorded message size: each one's size is what the calibrated model
    moves in its measured transfer time, so a large all-gather is not re-timed as a 1 MiB one."""
    ratios = np.ones(len(nodes))
    cache: dict[int, tuple[float, Prediction | None]] = {}
    pred = None
    for i, v in enumerate(nodes):
        seconds = max(float(graph.dur[v]) / 1e9, 1e-9)
        key = int(round(math.log2(seconds) * 8))  # durations within ~9 % share an inferred size
        if key not in cache:
            size = model.size_for_time(CollectiveKind(kind), seconds, shape_old)
            cache[key] = collective_ratio(kind, size, shape_old, shape_new, size_ratio, model, model_new)
        ratios[i], pred = cache[key]
    return ratios, pred
