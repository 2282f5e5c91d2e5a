"""GPU kernels for a new model shape or tensor-parallel size: GEMMs by their recorded shapes,
attention by FLOPs, elementwise by bytes; tensor parallelism added to a trace without it."""

from __future__ import annotations

from typing import Any

import numpy as np

from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.perf.kernel_curves import KernelCurve, fit_curve, profile_curves
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import CollectiveKind, Job, Kind
from lumos_core.whatif.baseline import gemm_shape
from lumos_core.whatif.config import JobConfig
from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.families import family_of_nodes
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.ratios import (
    MEMORY_BOUND,
    dims_ratio,
    gemm_flop_ratio,
    gemm_ratio,
    layer_gemm_flops,
    safe_ratio,
    value_map,
)


def fit_gemm_curve(
    job: Job, graph: ExecutionGraph, gpu: GpuProfile, dtype_bytes: int = 2, fam: np.ndarray | None = None
) -> KernelCurve:
    """The saturating GEMM curve (:mod:`lumos_core.perf.kernel_curves`) fitted to this trace's GEMM
    kernels with recorded shapes, the profile's curve as prior. Kernels a shape cannot explain
    (faster than the peak: the recorded shape is not what ran) or that the memory roofline bounds
    say nothing about compute efficiency and are left out. ``fam``: :func:`family_of_nodes` of
    ``graph`` when the caller has it."""
    prior = profile_curves(gpu, dtype_bytes)["gemm"]
    if fam is None:
        fam = family_of_nodes(graph, {t.rank: t for t in job.ranks})
    gemm = np.flatnonzero((graph.node_type == NodeType.GPU) & (fam == Family.GEMM))
    work, seconds = [], []
    per_shape: dict[tuple[int, int, int], list[float]] = {}
    for v, shape in zip(gemm.tolist(), gemm_shapes_of_nodes(job, graph, gemm)):
        if shape:
            per_shape.setdefault(shape, []).append(float(graph.dur[v]) / 1e9)
    peak = prior.peak
    for (m, k, n), durs in per_shape.items():
        flops = costs.gemm_flops(m, n, k)
        t = float(np.median(durs))  # one sample per shape: repeats are the same kernel
        memory = dtype_bytes * (m * k + k * n + m * n) / (gpu.hbm_bandwidth * gpu.memory_efficiency)
        if t <= 0 or flops / t > peak or memory > 0.5 * t:
            continue
        work.append(flops * costs.wave_factor(m, n, k, gpu.sm_count))  # the curve's work: SMs busy
        seconds.append(t)
    return fit_curve(prior, work, seconds)


def retime_compute(ctx: RetimeContext, plan: RetimePlan, gemm_curve: KernelCurve | None = None) -> None:
    """GEMMs by their recorded shapes: with a hardware profile its measured rate for their shape
    class, else the GEMM efficiency curve (``gemm_curve``: fitted to the trace); attention by FLOPs
    on its curve, elementwise by bytes."""
    job, graph, fam, task, base, config = ctx.job, ctx.graph, ctx.fam, ctx.task, ctx.base, ctx.config
    sizes, tok_ratio, h_ratio, gpu, profile = ctx.sizes, ctx.tok_ratio, ctx.h_ratio, ctx.gpu_old, ctx.profile
    tp_ratio = base.tp / config.tp
    gemm = np.flatnonzero(task & (fam == Family.GEMM))
    shaped = gemm_shapes_of_nodes(job, graph, gemm)
    by_shape: dict[tuple[int, int, int], list[int]] = {}
    unshaped: list[int] = []
    for v, shape in zip(gemm.tolist(), shaped):
        (by_shape.setdefault(shape, []) if shape else unshaped).append(v)  # type: ignore[arg-type]
    for shape, nodes in by_shape.items():
        flops = 2.0 * shape[0] * shape[1] * shape[2]
        pr = (
            profile.gemm_time_ratio(flops, flops * gemm_flop_ratio(shape, sizes, tok_ratio))
            if profile is not None
            else None
        )
        r = (
            pr if pr is not None else gemm_ratio(shape, sizes, tok_ratio, gpu, gpu, curve=gemm_curve)
        ) * tp_ratio
        if pr is not None:
            how = "profile's rate for the shape class"
        else:
            how = "GEMM efficiency curve" + (f" ({gemm_curve.source})" if gemm_curve else "")
        plan.apply(
            np.asarray(nodes),
            r,
            "GEMM",
            f"FLOPs of the recorded shape, {how}" + (" / TP" if tp_ratio != 1 else ""),
            f"{shape[0]}x{shape[1]}x{shape[2]} scaled",
        )
    if unshaped:
        h, f = base.hidden, base.ffn
        if h and f:
            r = (
                tok_ratio
                * layer_gemm_flops(config.hidden or h, config.ffn or f)
                / layer_gemm_flops(h, f)
                * tp_ratio
            )
        else:
            r = tok_ratio * tp_ratio
        plan.apply(
            np.asarray(unshaped),
            r,
            "GEMM (no recorded shape)",
            "per-layer GEMM FLOPs (4h^2 + 2h*ffn) x tokens / TP",
        )
    heads_ratio = safe_ratio(config.heads, base.heads) if config.heads and base.heads else 1.0
    att = np.flatnonzero(task & (fam == Family.ATTENTION))
    seq_ratio = safe_ratio(config.seq, base.seq)
    mb_ratio = safe_ratio(config.micro_batch, base.micro_batch)
    flops_ratio = mb_ratio * seq_ratio * seq_ratio * h_ratio * tp_ratio
    old_flops = _attention_flops(base)
    if old_flops:
        # On the attention curve: a short-sequence kernel pays a fixed cost its FLOPs do not show.
        curve = profile_curves(gpu)["attention"]
        att_ratio = curve.time(old_flops * flops_ratio) / curve.time(old_flops)
        how = "FLOPs (micro-batch · seq² · hidden / TP) on the attention efficiency curve"
    else:
        att_ratio, how = flops_ratio, "FLOPs ∝ micro-batch · seq² · hidden / TP"
    plan.apply(att, att_ratio, "attention", how, f"heads x{heads_ratio:g}" if heads_ratio != 1 else "")
    ew = np.flatnonzero(task & np.isin(fam, MEMORY_BOUND))
    # Elementwise kernels scale with the tensors they touch: the launching op's recorded input shapes
    # say which dimensions those are (a layer norm over hidden is not sharded by TP; a GELU over the
    # FFN is). Without shapes, tokens x hidden (/ TP).
    values = value_map(base, config)
    by_ratio: dict[float, list[int]] = {}
    fallback: list[int] = []
    for v, dims in zip(ew.tolist(), launching_op_dims(job, graph, ew)):
        r = dims_ratio(dims, values) if dims is not None else None
        (by_ratio.setdefault(round(r, 6), []) if r is not None else fallback).append(v)  # type: ignore[arg-type]
    for r, nodes in by_ratio.items():
        plan.apply(
            np.asarray(nodes), r, "elementwise / norm / copies", "bytes of the launching op's recorded shapes"
        )
    plan.apply(
        np.asarray(fallback, np.int64),
        tok_ratio * h_ratio * (tp_ratio if config.tp != base.tp else 1.0),
        "elementwise / norm / copies",
        "bytes ∝ tokens · hidden (no recorded shapes)",
    )


def launching_op_dims(job: Job, graph: ExecutionGraph, nodes: np.ndarray) -> list[Any]:
    """Input Dims of the CPU op that launched each GPU node (None when not recorded)."""
    by_rank = {t.rank: t for t in job.ranks}
    out: list[Any] = []
    cache: dict[tuple[int, int], Any] = {}
    for v in nodes.tolist():
        r, e = int(graph.rank[v]), int(graph.event[v])
        t = by_rank[r]
        launch = int(t.launch[e]) if e >= 0 else -1
        op = int(t.parent[launch]) if launch >= 0 else -1
        key = (r, op)
        if key not in cache:
            cache[key] = t.args_of(op).get("Input Dims") if op >= 0 and t.kind[op] == Kind.CPU_OP else None
        out.append(cache[key])
    return out


def gemm_shapes_of_nodes(
    job: Job, graph: ExecutionGraph, nodes: np.ndarray
) -> list[tuple[int, int, int] | None]:
    """(M, K, N) of each GEMM node: its own Input Dims (CPU op) or those of the op that launched it."""
    by_rank = {t.rank: t for t in job.ranks}
    out: list[tuple[int, int, int] | None] = []
    cache: dict[tuple[int, int], tuple[int, int, int] | None] = {}
    for v in nodes.tolist():
        r, e = int(graph.rank[v]), int(graph.event[v])
        t = by_rank[r]
        op = e
        if t.kind[e] != Kind.CPU_OP:
            launch = int(t.launch[e])
            op = int(t.parent[launch]) if launch >= 0 else -1
            while op >= 0 and t.kind[op] == Kind.RUNTIME:
                op = int(t.parent[op])
        key = (r, op)
        if key not in cache:
            cache[key] = gemm_shape(t.name_of(op), t.args_of(op).get("Input Dims")) if op >= 0 else None
        out.append(cache[key])
    return out


def add_tp_allreduces(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Tensor parallelism added to a trace without it: Megatron all-reduces the activations after
    the attention projection and the second FFN GEMM in the forward pass, and the input gradients of
    the QKV and first FFN GEMMs in the backward pass (4 per layer and microbatch), synchronously on
    the compute stream. Those GEMMs are found by shape (tokens x {hidden, 3 hidden, FFN} -> hidden)
    and each is followed by the all-reduce's NCCL-model time at the new TP size; one backward GEMM
    shares a forward shape, so the times are scaled to 4 per layer."""
    job, graph, fam, task, baseline, config = ctx.job, ctx.graph, ctx.fam, ctx.task, ctx.baseline, ctx.config
    gpu, tok_ratio, notes = ctx.gpu_new, ctx.tok_ratio, ctx.notes
    base = baseline.config
    h, f = base.hidden, base.ffn
    tokens = baseline.fields["tokens"].value if "tokens" in baseline.fields else None
    if not (h and f and tokens):
        notes.append(
            "TP all-reduces not added: the trace's hidden/FFN size or tokens are unknown "
            "(give --baseline-hidden and --baseline-ffn)"
        )
        return
    gemm = np.flatnonzero(task & (fam == Family.GEMM))
    shapes = gemm_shapes_of_nodes(job, graph, gemm)
    hit = np.asarray(
        [s is not None and s[0] == tokens and s[2] == h and s[1] in (h, 3 * h, f) for s in shapes], bool
    )
    nodes = gemm[hit] if len(gemm) else gemm
    if len(nodes) == 0:
        notes.append("TP all-reduces not added: no layer GEMM with a recorded shape was found")
        return
    h2 = config.hidden or h
    nbytes = float(round(tokens * tok_ratio) * h2 * 2)
    seconds = costs.collective_time(
        CollectiveKind.ALL_REDUCE, nbytes, config.tp, gpu, inter_node=config.tp > gpu.gpus_per_node
    )
    per_rank = np.bincount(graph.rank[nodes] - graph.rank[nodes].min())
    layers = base.layers or 0
    expected = 4 * layers * max(base.microbatches, 1)
    iters = {t.rank: max(len(t.iterations), 1) for t in job.ranks}
    share = np.ones(len(nodes))
    if expected:
        r0 = graph.rank[nodes].min()
        for r, n in enumerate(per_rank.tolist()):
            if n:
                sel = graph.rank[nodes] == r + r0
                share[sel] = min(1.0, expected * iters.get(int(r + r0), 1) / n)
    add = seconds * 1e9 * share
    cur = np.maximum(graph.dur[nodes] * plan.ratio[nodes], 1.0)
    plan.apply(
        nodes,
        (cur + add) / cur,
        "TP all-reduce",
        "NCCL all-reduce after each row-parallel GEMM (and input-gradient GEMM), on the compute stream",
        f"{nbytes / 2**20:.1f} MiB over {config.tp} GPUs, {seconds * 1e6:.0f} µs each",
    )


def _attention_flops(base: JobConfig) -> float | None:
    """Forward FLOPs of one attention kernel of the traced configuration (None if its shape is not
    known): micro-batch x heads per TP rank x seq^2 x head dim."""
    if not (base.micro_batch and base.seq and base.hidden and base.heads):
        return None
    return costs.attention_flops(
        base.micro_batch, max(base.heads // base.tp, 1), base.seq, base.hidden // base.heads
    )
