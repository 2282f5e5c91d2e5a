"""The duration rules, in the order they compose, each named by the knobs it serves
(:attr:`lumos_core.whatif.knob_registry.Knob.rules`). Every rule runs for every estimate and
decides itself whether the change concerns it (an unchanged knob is an identity ratio). A new
rule is a function ``(ctx, plan) -> None`` added to :data:`RULES` under the name its knob gives."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lumos_core.whatif.retime.comm import retime_collectives
from lumos_core.whatif.retime.compute import add_tp_allreduces, fit_gemm_curve, retime_compute
from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.cpu_ops import retime_cpu_ops
from lumos_core.whatif.retime.host import scale_host
from lumos_core.whatif.retime.layer_rules import retime_cp, retime_mlp, retime_recompute, retime_sp
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.ratios import COMPUTE_BOUND, MEMORY_BOUND, hardware_ratio, qkv_width

Rule = Callable[[RetimeContext, RetimePlan], None]


def compute_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Model shape and TP: kernels (or CPU operators on CPU-only traces) by their new work."""
    retime_mlp(ctx, plan)
    if not ctx.shape_change:
        return
    if ctx.has_gpu:
        curve = fit_gemm_curve(ctx.job, ctx.graph, ctx.gpu_old, fam=ctx.fam)
        retime_compute(ctx, plan, curve)
    else:
        retime_cpu_ops(ctx, plan)
    kv0, kv1 = ctx.base.kv_heads, ctx.config.kv_heads
    if kv1 is not None and kv0 is not None and kv1 != kv0:
        q0, q1 = qkv_width(ctx.base), qkv_width(ctx.config)
        ctx.notes.append(
            f"kv_heads={kv1} (rule compute): the QKV GEMMs by their recorded shapes at width {q0} -> {q1} "
            f"((heads + 2 x KV heads) x head dim; /TP per rank); attention kernels keep their time (every "
            "query head still attends over all keys)"
        )


def tp_allreduce_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Tensor parallelism added to a trace recorded without it: Megatron's per-layer all-reduces."""
    if ctx.has_gpu and ctx.base.tp == 1 and ctx.config.tp > 1:
        add_tp_allreduces(ctx, plan)


def sp_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Sequence parallelism: TP-replicated norms, dropouts and residuals on tokens / TP."""
    retime_sp(ctx, plan)


def cp_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Context parallelism: tokens / CP per rank, attention's K/V exchanged over the CP group."""
    retime_cp(ctx, plan)


def recompute_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Activation recomputation: each layer's backward gains (or loses) the recomputed forward,
    after the shape rules so the recomputed forward is the re-timed one."""
    retime_recompute(ctx, plan)


def hardware_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Another GPU: compute-bound kernels by peak FLOP/s, memory-bound ones by HBM bandwidth."""
    old, new = ctx.gpu_old, ctx.gpu_new
    if new.name == old.name or not ctx.has_gpu:
        return
    ratio = hardware_ratio(ctx.fam, old, new)
    for f, label, what in (
        (COMPUTE_BOUND, "peak FLOP/s", "compute-bound kernels"),
        (MEMORY_BOUND, "HBM bandwidth", "memory-bound kernels"),
    ):
        sel = np.flatnonzero(ctx.task & np.isin(ctx.fam, f))
        plan.apply(sel, ratio[sel], what, f"roofline: ratio of {label}", f"{old.name} -> {new.name}")


def collectives_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Group sizes, message sizes, node layouts and links: the NCCL model."""
    retime_collectives(ctx, plan)


def host_rule(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Host-side time (Python, launch calls) x ``cpu_scale``."""
    if ctx.config.cpu_scale == 1.0:
        return
    scale_host(ctx.graph, plan, ctx.config.cpu_scale)
    if not ctx.has_gpu:
        ctx.notes.append("--cpu-scale on a CPU-only trace scales all of its work (there is no GPU side)")


# In the order they compose (a node's "why" is the last rule that re-timed it).
RULES: dict[str, Rule] = {
    "compute": compute_rule,
    "tp_allreduce": tp_allreduce_rule,
    "sp": sp_rule,
    "cp": cp_rule,
    "recompute": recompute_rule,
    "hardware": hardware_rule,
    "collectives": collectives_rule,
    "host": host_rule,
}
