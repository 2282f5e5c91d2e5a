"""Collectives for new group sizes, message sizes, node spans and links (the alpha-beta model,
calibrated on the trace's own collectives)."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.trace.model import CollectiveKind, Job
from lumos_core.whatif.baseline import group_roles
from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.ratios import collective_ratio, layer_gemm_flops


def comm_model_from_trace(job: Job, graph: ExecutionGraph, gpu: GpuProfile) -> costs.CommModel:
    """The alpha-beta model calibrated on this trace's collectives (transfer time = the joined
    transfer node, i.e. the shortest kernel of each instance across ranks)."""
    samples = []
    by_rank = {t.rank: t for t in job.ranks}
    transfer = np.flatnonzero(graph.arrive_of >= 0)
    seen: set[tuple[int, int]] = set()
    for v in transfer.tolist():
        r, e = int(graph.rank[v]), int(graph.event[v])
        t = by_rank[r]
        rows = np.flatnonzero(t.collectives.event == e)
        if len(rows) == 0:
            continue
        row = int(rows[0])
        c = t.collectives
        size = int(c.size_bytes[row])
        n = int(c.group_size[row])
        if size <= 0 or n <= 1:
            continue
        key = (int(c.kind[row]), size)
        if key in seen and len(samples) > 200:
            continue
        seen.add(key)
        samples.append(
            costs.CommSample(
                kind=CollectiveKind(int(c.kind[row])),
                size_bytes=size,
                group_size=n,
                seconds=graph.dur[v] / 1e9,
                inter_node=False,
            )
        )
    return costs.CommModel.from_profile(gpu).calibrate(samples)


def retime_collectives(
    job: Job,
    graph: ExecutionGraph,
    plan: RetimePlan,
    baseline: Baseline,
    config: JobConfig,
    model: costs.CommModel,
    gpu_old: GpuProfile,
    gpu_new: GpuProfile,
    tok_ratio: float,
    h_ratio: float,
    notes: list[str],
) -> None:
    base = baseline.config
    roles, _ = group_roles(job)
    by_rank = {t.rank: t for t in job.ranks}
    new_size = {"dp": config.dp, "tp": config.tp, "pp": config.pp, "world": config.world_size}
    old_size = {"dp": base.dp, "tp": base.tp, "pp": base.pp, "world": base.world_size}
    stride_new = {"tp": 1, "dp": config.tp, "pp": config.tp * config.dp, "world": 1}
    stride_old = {"tp": 1, "dp": base.tp, "pp": base.tp * base.dp, "world": 1}
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
    gpn_old, gpn_new = gpu_old.gpus_per_node, gpu_new.gpus_per_node
    groups: dict[tuple[str, int, int], list[int]] = {}
    for r, t in by_rank.items():
        c = t.collectives
        if len(c) == 0:
            continue
        row_of = np.full(len(t), -1, np.int64)
        row_of[c.event] = np.arange(len(c))
        sel = np.flatnonzero((graph.rank == r) & (graph.event >= 0) & (graph.node_type != NodeType.ARRIVE))
        rows = row_of[graph.event[sel]]
        for v, row in zip(sel[rows >= 0].tolist(), rows[rows >= 0].tolist()):
            pg = int(c.pg[row])
            role = (
                roles.get(t.strings[pg], "dp") if pg >= 0 else ("dp" if base.tp == base.pp == 1 else "world")
            )
            groups.setdefault((role, int(c.kind[row]), int(c.size_bytes[row])), []).append(v)
    if base.tp == 1 and base.pp == 1:  # the whole world is the data-parallel group
        groups = {("dp" if role == "world" else role, k, s): v for (role, k, s), v in groups.items()}
    for (role, kind, size), nodes in groups.items():
        n_old = old_size.get(role, 1) if role != "world" else base.world_size
        n_new = new_size.get(role, 1) if role != "world" else config.world_size
        size_ratio = params_ratio if role in ("dp", "world") else act_ratio
        if role == "pp":
            size_ratio = act_ratio
        span_old = _first_group_spans_nodes(n_old, stride_old.get(role, 1), gpn_old)
        span_new = _first_group_spans_nodes(n_new, stride_new.get(role, 1), gpn_new)
        if (n_old, n_new, size_ratio, span_old, span_new, gpu_old.name) == (
            n_new,
            n_old,
            1.0,
            span_new,
            span_old,
            gpu_new.name,
        ) and n_old == n_new:
            continue
        r = collective_ratio(
            kind, size, n_old, n_new, span_old, span_new, size_ratio, gpu_old, gpu_new, model
        )
        if n_new <= 1:
            r = 0.0
        scope = "inter-node" if span_new else "intra-node"
        label = CollectiveKind(kind).label
        plan.apply(
            np.asarray(nodes),
            r,
            f"{role.upper()} {label}",
            f"alpha-beta ({model.source(CollectiveKind(kind), span_new)}), {scope}",
            f"group {n_old} -> {n_new}" + (f", message x{size_ratio:.3g}" if size_ratio != 1 else ""),
        )


def _first_group_spans_nodes(group_size: int, stride: int, gpus_per_node: int) -> bool:
    """Does the first group of ``group_size`` ranks spaced ``stride`` apart (Megatron's order) cover
    more than one node?"""
    return costs.spans_nodes(range(0, group_size * stride, stride), gpus_per_node)
