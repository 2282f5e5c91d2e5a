"""GPU kernels for a new model shape or tensor-parallel size: GEMMs by their recorded shapes,
attention by FLOPs, elementwise by bytes; tensor parallelism added to a trace without it."""

from __future__ import annotations

from typing import Any

import numpy as np

from lumos_core.graph.model import ExecutionGraph
from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.perf.profile import HardwareProfile
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import CollectiveKind, Job, Kind
from lumos_core.whatif.baseline import gemm_shape
from lumos_core.whatif.config import Baseline, JobConfig
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


def retime_compute(
    job: Job,
    graph: ExecutionGraph,
    plan: RetimePlan,
    fam: np.ndarray,
    task: np.ndarray,
    base: JobConfig,
    config: JobConfig,
    sizes: dict[int, int],
    tok_ratio: float,
    h_ratio: float,
    gpu: GpuProfile,
    profile: HardwareProfile | None = None,
) -> None:
    """GEMMs by their recorded shapes, attention by FLOPs, elementwise by bytes. With a hardware
    profile, GEMMs take its measured rate for their shape class instead of the roofline's."""
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
        r = (pr if pr is not None else gemm_ratio(shape, sizes, tok_ratio, gpu, gpu)) * tp_ratio
        how = "profile's rate for the shape class" if pr is not None else "roofline efficiency"
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
    plan.apply(
        att,
        mb_ratio * seq_ratio * seq_ratio * h_ratio * tp_ratio,
        "attention",
        "FLOPs ∝ micro-batch · seq² · hidden / TP",
        f"heads x{heads_ratio:g}" if heads_ratio != 1 else "",
    )
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


def add_tp_allreduces(
    job: Job,
    graph: ExecutionGraph,
    plan: RetimePlan,
    fam: np.ndarray,
    task: np.ndarray,
    baseline: Baseline,
    config: JobConfig,
    gpu: GpuProfile,
    tok_ratio: float,
    notes: list[str],
) -> None:
    """Tensor parallelism added to a trace without it: Megatron all-reduces the activations after
    the attention projection and the second FFN GEMM in the forward pass, and the input gradients of
    the QKV and first FFN GEMMs in the backward pass (4 per layer and microbatch), synchronously on
    the compute stream. Those GEMMs are found by shape (tokens x {hidden, 3 hidden, FFN} -> hidden)
    and each is followed by the all-reduce's NCCL-model time at the new TP size; one backward GEMM
    shares a forward shape, so the times are scaled to 4 per layer."""
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
