"""All the re-timing rules for one configuration change, in the order they compose."""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.perf.nccl import NcclModel
from lumos_core.perf.profile import HardwareProfile
from lumos_core.trace.model import Job, Kind
from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.retime.comm import comm_model_from_trace, retime_collectives
from lumos_core.whatif.retime.compute import add_tp_allreduces, fit_gemm_curve, retime_compute
from lumos_core.whatif.retime.cpu_ops import retime_cpu_ops
from lumos_core.whatif.retime.families import family_of_nodes
from lumos_core.whatif.retime.host import scale_host
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.rank_nodes import nodes_by_rank
from lumos_core.whatif.retime.ratios import COMPUTE_BOUND, MEMORY_BOUND, hardware_ratio, safe_ratio, width_map


def plan_retiming(
    job: Job,
    graph: ExecutionGraph,
    baseline: Baseline,
    config: JobConfig,
    notes: list[str],
    model: NcclModel | None = None,
    profile: HardwareProfile | None = None,
) -> RetimePlan:
    """Duration ratios for every node of ``graph`` (see :mod:`lumos_core.whatif.retime`)."""
    base = baseline.config
    plan = RetimePlan.identity(graph.n_nodes)
    gpu_old = get_gpu(base.gpu)
    gpu_new = with_links(get_gpu(config.gpu), config)
    ranks = {t.rank: t for t in job.ranks}
    by_rank = nodes_by_rank(graph)
    has_gpu = any(np.isin(t.kind, [Kind.KERNEL]).any() for t in job.ranks)
    task = (graph.node_type == NodeType.GPU) if has_gpu else (graph.node_type == NodeType.CPU)
    task &= graph.arrive_of < 0  # collective transfers are re-timed by the communication model
    model = model or comm_model_from_trace(job, graph, gpu_old)

    # --- model shape: tokens, hidden, FFN ---
    tok_ratio = safe_ratio(config.seq, base.seq) * safe_ratio(config.micro_batch, base.micro_batch)
    # Widths a hidden/FFN change moves, at the trace's TP (sharded widths included); the TP split
    # itself divides every layer GEMM's work (Megatron splits QKV/FFN columns and the projection
    # rows, and the LM head by vocabulary).
    sizes = width_map(base, dataclasses.replace(config, tp=base.tp))
    h_ratio = safe_ratio(config.hidden, base.hidden)
    shape_change = tok_ratio != 1.0 or bool(sizes) or config.tp != base.tp
    # kernel families decide the compute rules only (collectives and host time do without them)
    needs_fam = has_gpu and (shape_change or (base.tp == 1 and config.tp > 1) or gpu_new.name != gpu_old.name)
    fam = family_of_nodes(graph, ranks, by_rank) if needs_fam else np.zeros(0, np.int16)
    if shape_change and has_gpu:
        curve = fit_gemm_curve(job, graph, gpu_old, fam=fam)
        retime_compute(
            job, graph, plan, fam, task, base, config, sizes, tok_ratio, h_ratio, gpu_old, profile, curve
        )
    elif shape_change:
        retime_cpu_ops(graph, plan, ranks, base, config, sizes, tok_ratio, h_ratio, profile)

    if has_gpu and base.tp == 1 and config.tp > 1:
        add_tp_allreduces(job, graph, plan, fam, task, baseline, config, gpu_new, tok_ratio, notes)

    # --- hardware ---
    if gpu_new.name != gpu_old.name and has_gpu:
        ratio = hardware_ratio(fam, gpu_old, gpu_new)
        for f, label, what in (
            (COMPUTE_BOUND, "peak FLOP/s", "compute-bound kernels"),
            (MEMORY_BOUND, "HBM bandwidth", "memory-bound kernels"),
        ):
            sel = np.flatnonzero(task & np.isin(fam, f))
            plan.apply(
                sel, ratio[sel], what, f"roofline: ratio of {label}", f"{gpu_old.name} -> {gpu_new.name}"
            )

    # --- communication: group sizes, message sizes, links ---
    retime_collectives(
        job, graph, plan, baseline, config, model, gpu_old, gpu_new, tok_ratio, h_ratio, notes, by_rank
    )

    # --- host side ---
    if config.cpu_scale != 1.0:
        scale_host(graph, plan, config.cpu_scale)
        if not has_gpu:
            notes.append("--cpu-scale on a CPU-only trace scales all of its work (there is no GPU side)")
    return plan


def with_links(gpu: GpuProfile, config: JobConfig) -> GpuProfile:
    changes: dict[str, float] = {}
    if config.nvlink_gbps:
        changes["nvlink_bandwidth"] = config.nvlink_gbps * 1e9
    if config.network_gbps:
        changes["network_bandwidth"] = config.network_gbps * 1e9
    return dataclasses.replace(gpu, **changes) if changes else gpu
