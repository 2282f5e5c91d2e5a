"""Rules that re-time parts of each layer: activation recomputation, sequence parallelism and
context parallelism. They read each node's place in the step (:mod:`.phases`) and the trace's own
measured durations, so a layer's recomputed forward costs what that forward cost in this trace."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import NodeType
from lumos_core.perf import costs
from lumos_core.perf.kernel_curves import profile_curves
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import CollectiveKind
from lumos_core.whatif.retime.compute import fit_gemm_curve, gemm_shapes_of_nodes, launching_op_dims
from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.phases import PER_MICROBATCH
from lumos_core.whatif.retime.plan import RetimePlan
from lumos_core.whatif.retime.ratios import MEMORY_BOUND, gemm_ratio
from lumos_core.whatif.segments import Phase


def _sums(keys: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Sum of ``values`` per key, read back at each key of ``at`` (0 for a key with no value)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    total = np.bincount(inv, weights=values, minlength=len(uniq))
    pos = np.searchsorted(uniq, at)
    pos = np.minimum(pos, max(len(uniq) - 1, 0))
    hit = (uniq[pos] == at) if len(uniq) else np.zeros(len(at), bool)
    return np.where(hit, total[pos] if len(uniq) else 0.0, 0.0)


def retime_recompute(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Activation recomputation (Korthikanti et al. 2022): ``full`` runs each layer's forward again
    (its kernels and TP collectives) before that layer's backward, ``selective`` its attention core.
    Each layer pass's backward kernels are scaled by (B + extra_new - extra_traced) / B, where B is
    that backward's time and the extras are the recomputed parts of the same layer pass's forward,
    as measured in this trace (a baseline that already recomputes has them inside B)."""
    old, new = ctx.base.recompute, ctx.config.recompute
    if old == new:
        return
    if not ctx.has_gpu:
        ctx.notes.append(f"recompute={new}: not re-timed on a CPU-only trace (no layer kernels)")
        return
    labels = ctx.labels()
    if labels is None:  # say so by name: otherwise the estimate reads +0.0 % as "costs nothing"
        ctx.notes.append(
            f"recompute={new}: not re-timed (+0.0 % is not a prediction): the trace's layers were not "
            "found, so there is no layer forward to re-run (see the layer-level note)"
        )
        return
    graph, fam = ctx.graph, ctx.families()
    cur = graph.dur * plan.ratio
    gpu = graph.node_type == NodeType.GPU
    key = labels.layer_key(graph.rank)
    in_layer = labels.layer >= 0
    fwd = np.flatnonzero(gpu & in_layer & (labels.phase == Phase.F))
    bwd = np.flatnonzero(ctx.task & in_layer & (labels.phase == Phase.B))
    if len(fwd) == 0 or len(bwd) == 0:
        ctx.notes.append(
            f"recompute={new}: not re-timed (+0.0 % is not a prediction): no layer forward/backward "
            "kernels found"
        )
        return
    att = fwd[fam[fwd] == Family.ATTENTION]
    # A rebuilt graph holds several copies of a traced event (one per microbatch it stands for):
    # each traced event counts once, and a layer's time is per microbatch (its microbatches alike).
    event_id = (graph.rank.astype(np.int64) << 32) | (graph.event.astype(np.int64) & 0xFFFFFFFF)

    def per_microbatch(nodes: np.ndarray, at: np.ndarray) -> np.ndarray:
        if len(nodes) == 0:
            return np.zeros(len(at))
        _, first = np.unique(event_id[nodes], return_index=True)
        one = nodes[first]
        total = _sums(key[one], cur[one], at)
        pairs = np.unique(np.stack([key[one], labels.mb[one]], axis=1), axis=0)
        count = _sums(pairs[:, 0], np.ones(len(pairs)), at)
        return total / np.maximum(count, 1.0)

    def extra(mode: str, at: np.ndarray) -> np.ndarray:
        if mode == "full":
            return per_microbatch(fwd, at)
        if mode == "selective":
            return per_microbatch(att, at)
        return np.zeros(len(at))

    b_keys = key[bwd]
    b_mb = per_microbatch(bwd, b_keys)
    add = extra(new, b_keys) - extra(old, b_keys)
    factor = np.maximum(b_mb + add, 0.05 * b_mb) / np.maximum(b_mb, 1.0)
    plan.apply(
        bwd,
        factor,
        "layer backward with recomputation",
        f"recompute {old} -> {new}: the layer's own measured forward "
        + ("kernels and TP collectives" if "full" in (old, new) else "attention kernels")
        + " added to (or taken from) its backward",
        "rule recompute",
    )
    share = float(np.sum(cur[bwd] * (factor - 1)) / max(float(np.sum(cur[bwd])), 1.0))
    what = {
        "full": "each layer's forward runs again before its backward",
        "selective": "each layer's attention core (attention kernels) runs again in its backward",
        "none": "no forward is re-run",
    }
    ctx.notes.append(
        f"recompute={new} (rule recompute, traced {old}): {what[new]}; re-timed from this trace's own "
        f"forward kernels, {100 * share:+.1f} % of the layers' backward compute time; the host time of "
        "launching the recomputed kernels is not added (it matters only when the CPU sets the pace)"
        + (
            " (the recomputed forward's TP collectives are counted as backward kernel time)"
            if ctx.base.tp > 1 and "full" in (old, new)
            else ""
        )
        + ("" if len(att) or "selective" not in (old, new) else "; no attention kernels found to recompute")
        + _traced_guess(ctx)
    )


def _traced_guess(ctx: RetimeContext) -> str:
    """That the traced mode was assumed, when the trace did not show it: a job that did recompute
    would be re-timed from the wrong starting point."""
    found = ctx.baseline.fields.get("recompute")
    if found is None or found.confidence not in ("guess", "unknown"):
        return ""
    return f"; the traced mode is a guess ({found.how}): give --baseline-recompute if the job recomputed"


def retime_sp(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Sequence parallelism: the norms, dropouts and residual adds that TP replicates (tensors of the
    full hidden width) run on tokens / TP; the TP all-reduce becomes a reduce-scatter and an
    all-gather moving the same bytes on a ring, so collective times are kept."""
    old, new, t = ctx.base.sp, ctx.config.sp, ctx.config.tp
    if old == new:
        return
    if t == 1:
        ctx.notes.append(
            f"sp={'true' if new else 'false'}: with TP 1 there is nothing to shard; time unchanged"
        )
        return
    h = ctx.base.hidden
    labels = ctx.labels() if ctx.has_gpu else None
    if labels is None or not h:
        ctx.notes.append(
            f"sp={'true' if new else 'false'}: not re-timed (needs GPU layer kernels and the hidden size)"
        )
        return
    fam = ctx.families()
    layer = np.isin(labels.phase, (Phase.F, Phase.B)) & (labels.layer >= 0)
    ew = np.flatnonzero(ctx.task & layer & np.isin(fam, MEMORY_BOUND))
    dims = launching_op_dims(ctx.job, ctx.graph, ew)
    replicated = np.asarray(
        [bool(d) and isinstance(d[0], list) and len(d[0]) >= 2 and d[0][-1] == h for d in dims], bool
    )
    nodes = ew[replicated] if len(ew) else ew
    factor = 1.0 / t if new else float(t)
    plan.apply(
        nodes,
        factor,
        "norm / dropout / residual (TP-replicated)",
        "sequence parallelism: tokens / TP outside the TP regions"
        if new
        else "no sequence parallelism: all tokens",
        "rule sp",
    )
    ctx.notes.append(
        f"sp={'true' if new else 'false'} (rule sp): {len(nodes)} norm/dropout/residual kernels of full hidden "
        f"width x{factor:g}; TP all-reduce <-> reduce-scatter + all-gather moves the same bytes on a ring, "
        "so the TP collectives keep their time"
        + ("" if len(nodes) else " (no recorded input shapes of full hidden width were found)")
    )


def retime_cp(ctx: RetimeContext, plan: RetimePlan) -> None:
    """Context parallelism: a rank holds seq / CP tokens, so its per-microbatch GEMMs and elementwise
    work shrink with them and its attention computes seq / CP queries against all keys; K and V are
    exchanged over the CP group (all-gather in the forward, reduce-scatter of their gradients in the
    backward), overlapped with the attention as Megatron's ring does: an attention kernel takes the
    longer of its compute and its share of the exchange."""
    c0, c1 = ctx.base.cp, ctx.config.cp
    if c0 == c1:
        return
    labels = ctx.labels() if ctx.has_gpu else None
    if labels is None:
        ctx.notes.append(f"cp={c1}: not re-timed (needs the GPU kernels of the layers)")
        return
    r = c0 / c1
    graph, fam, cfg = ctx.graph, ctx.families(), ctx.config
    per_mb = ctx.task & np.isin(labels.phase, PER_MICROBATCH)
    gemm = np.flatnonzero(per_mb & (fam == Family.GEMM))
    curve = fit_gemm_curve(ctx.job, graph, ctx.gpu_old, fam=fam)
    by_ratio: dict[float, list[int]] = {}
    for v, shape in zip(gemm.tolist(), gemm_shapes_of_nodes(ctx.job, graph, gemm)):
        g = gemm_ratio(shape, {}, r, ctx.gpu_old, ctx.gpu_old, curve=curve) if shape else r
        by_ratio.setdefault(round(g, 6), []).append(v)
    for g, nodes in by_ratio.items():
        plan.apply(np.asarray(nodes), g, "GEMM", "tokens / CP on the GEMM efficiency curve", "rule cp")
    ew = np.flatnonzero(per_mb & np.isin(fam, MEMORY_BOUND))
    plan.apply(ew, r, "elementwise / norm / copies", "bytes ∝ tokens / CP", "rule cp")
    att = np.flatnonzero(per_mb & (fam == Family.ATTENTION))
    seq, b, heads, h = cfg.seq, cfg.micro_batch, cfg.heads, cfg.hidden
    if not (seq and b and heads and h) or len(att) == 0:
        plan.apply(att, r, "attention", "queries / CP against all keys", "rule cp")
        ctx.notes.append(f"cp={c1} (rule cp): per-rank tokens x{r:g}; K/V exchange not timed (shape unknown)")
        return
    hd = h // heads
    flops = costs.attention_flops(b, max(heads // cfg.tp, 1), seq // c0, hd, seq_k=seq)
    acurve = profile_curves(ctx.gpu_old)["attention"]
    a_ratio = acurve.time(flops * r) / acurve.time(flops)
    kv = (cfg.kv_heads or heads) * hd // cfg.tp
    nbytes = 2.0 * b * seq * kv * 2  # K and V of the whole sequence, bf16: the all-gather's output
    gpu = ctx.gpu_new
    inter = cfg.tp * c1 > gpu.gpus_per_node
    seconds = (
        costs.collective_time(CollectiveKind.ALL_GATHER, nbytes, c1, gpu, inter_node=inter) if c1 > 1 else 0.0
    )
    keys = labels.group_key(graph.rank)[att]
    per_pass = len(att) / max(len(np.unique(keys)), 1)  # attention kernels per layer pass
    comm_ns = seconds * 1e9 / per_pass
    cur = np.maximum(graph.dur[att] * plan.ratio[att], 1.0)
    new_t = np.maximum(cur * a_ratio, comm_ns)
    plan.apply(
        att,
        new_t / cur,
        "attention",
        "seq / CP queries against all keys on the attention curve, K/V exchange overlapped (ring)",
        f"rule cp: {nbytes / 2**20:.1f} MiB K/V over {c1} GPUs, {seconds * 1e6:.0f} µs per layer pass",
    )
    ctx.notes.append(
        f"cp={c1} (rule cp): per-rank tokens x{r:g} (GEMMs on the efficiency curve, elementwise by bytes), "
        f"attention x{a_ratio:.3f}, K/V exchange {seconds * 1e6:.0f} µs per layer pass overlapped with it; "
        f"gradients reduced over DP x CP = {cfg.dp * c1} ranks (rule collectives)"
    )


def retime_mlp(ctx: RetimeContext, plan: RetimePlan) -> None:
    """The feed-forward kind (GeLU <-> SwiGLU at the same FFN size f). A GeLU layer's MLP GEMMs are
    h x f and f x h (forward, input and weight gradients); SwiGLU's gate+up GEMM is h x 2f. By
    recorded shape, the FFN GEMMs of a GeLU trace (a dimension f / TP beside h) take 1.5x their time
    in aggregate (each shape group holds one up- and one down-projection GEMM: (2 + 1) / 2), and the
    gate+up GEMMs of a SwiGLU trace (a dimension 2f / TP) half theirs; the activation kernels keep
    their time (a stated approximation: SiLU x gate reads twice GeLU's bytes)."""
    old, new = ctx.base.mlp, ctx.config.mlp
    if old == new or not ctx.has_gpu:
        return
    f, h, t = ctx.base.ffn, ctx.base.hidden, ctx.base.tp
    if not (f and h):
        ctx.notes.append(f"mlp={new}: not re-timed (the trace's FFN and hidden sizes are unknown)")
        return
    fam = ctx.families()
    gemm = np.flatnonzero(ctx.task & (fam == Family.GEMM))
    width, factor = (f // t, 1.5) if old == "gelu" else (2 * f // t, 0.5)
    tokens = ctx.baseline.fields["tokens"].value if "tokens" in ctx.baseline.fields else None
    if tokens is None and ctx.base.seq and ctx.base.micro_batch:
        tokens = ctx.base.seq * ctx.base.micro_batch // ctx.base.cp
    want = sorted((h, width))

    def is_mlp(shape: tuple[int, int, int] | None) -> bool:
        # forward and input gradient: tokens x {h, width}; weight gradient: {h, width} with tokens
        # as the contraction. Both other dims must match (a width may equal h, e.g. f = 2h at TP 2).
        if not shape or tokens not in shape:
            return False
        rest = list(shape)
        rest.remove(tokens)
        return sorted(rest) == want

    hit = [v for v, s in zip(gemm.tolist(), gemm_shapes_of_nodes(ctx.job, ctx.graph, gemm)) if is_mlp(s)]
    plan.apply(
        np.asarray(hit, np.int64),
        factor,
        "MLP GEMM",
        f"{old} -> {new}: MLP GEMM work x{factor:g}",
        "rule compute",
    )
    ctx.notes.append(
        f"mlp={new} (rule compute, traced {old}): {len(hit)} MLP GEMMs with a {width}-wide dimension "
        f"x{factor:g} (SwiGLU's gate+up GEMM is twice the FFN width); norms and activations keep their time"
        + ("" if hit else " (no MLP GEMM with a recorded shape was found: time unchanged)")
    )
