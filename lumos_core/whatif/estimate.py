"""``lumos estimate``: predict a configuration that was never run (paper §3.4), by rewriting the
execution graph of the traced run and replaying it.

:func:`estimate` is a plain, picklable function of (loaded job, configuration) -> result, so many
can run in parallel (sweeps). The rewrite keeps the traced dependency patterns: durations change
(:mod:`lumos_core.whatif.retime`: collectives for new group and message sizes, kernels for new model
shapes or GPUs) and, for pipeline, microbatch and layer changes, the graph itself is rebuilt from
the traced per-layer tasks (:mod:`lumos_core.whatif.rewrite`).

Ranks that a configuration adds are copies of the traced ones they correspond to (data-parallel
replicas run the same work), so a job of 512 GPUs is simulated with its distinct ranks only and
expanded when its timeline is exported.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.replay.breakdown import (
    ITERATION_DEFINITION,
    Breakdown,
    activity,
    breakdown,
    iteration_windows,
)
from lumos_core.replay.run import predicted_rank
from lumos_core.replay.simulate import simulate
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import CollectiveKind, Job, Kind, RankTrace
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.config import Baseline, JobConfig, check
from lumos_core.whatif.retime import (
    RetimePlan,
    Retiming,
    collective_ratio,
    cpu_op_ratios,
    dims_ratio,
    family_of_nodes,
    gemm_flop_ratio,
    gemm_ratio,
    hardware_ratio,
    layer_gemm_flops,
    spans_nodes,
    value_map,
    width_map,
)

ESTIMATE_DEFINITION = (
    "predicted iteration time = mean over simulated ranks of their mean iteration time, over the "
    "iterations between consecutive ProfilerStep starts (the last, partial iteration is left out "
    "when there are several); breakdown likewise"
)


@dataclass
class Outcome:
    """Iteration time and breakdown of one configuration (measured, replayed or predicted)."""

    config: JobConfig
    iteration_us: float
    breakdown: Breakdown
    per_rank_us: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "iteration_us": round(self.iteration_us, 3),
            "breakdown": self.breakdown.as_us(),
            "per_rank_iteration_us": {r: round(v, 3) for r, v in self.per_rank_us.items()},
        }


@dataclass
class EstimateResult:
    """What :func:`estimate` returns (picklable: plain data and numpy arrays)."""

    baseline: Baseline
    measured: Outcome  # the trace itself
    replayed: Outcome  # the unmodified graph replayed (what identity predictions are held to)
    predicted: Outcome
    world_size: int
    timeline: list[RankTrace]  # simulated ranks, numbered in the new job
    represents: dict[int, list[int]]  # simulated rank -> the ranks of the new job it stands for
    retimed: list[Retiming]
    why: dict[int, np.ndarray]  # simulated rank -> per event: index into ``retimed`` (-1: measured)
    old_dur: dict[int, np.ndarray]  # simulated rank -> per event: its measured duration (ns)
    seconds: float
    notes: list[str] = field(default_factory=list)

    def explain(self, rank: int, event: int) -> str:
        """Why a predicted task lasts what it lasts (for the app's details panel)."""
        w = int(self.why[rank][event]) if rank in self.why else -1
        t = next(p for p in self.timeline if p.rank == rank)
        old = int(self.old_dur[rank][event])
        new = int(t.dur[event])
        if w < 0:
            return f"measured duration kept ({old / 1000:.1f} µs)"
        r = self.retimed[w]
        return (
            f"{r.what}: {r.model}"
            + (f" ({r.detail})" if r.detail else "")
            + f"; measured {old / 1000:.1f} µs -> predicted {new / 1000:.1f} µs"
        )

    def as_dict(self) -> dict[str, Any]:
        b = self.baseline
        return {
            "definition": ESTIMATE_DEFINITION,
            "iteration_definition": ITERATION_DEFINITION,
            "baseline": {
                **self.measured.as_dict(),
                "replayed_iteration_us": round(self.replayed.iteration_us, 3),
                "replayed_breakdown": self.replayed.breakdown.as_us(),
                "inferred": {
                    k: {"value": v.value, "confidence": v.confidence, "how": v.how}
                    for k, v in b.fields.items()
                },
            },
            "predicted": {
                **self.predicted.as_dict(),
                "ranks": self.world_size,
                "simulated_ranks": sorted(self.represents),
                "change_pct": round(100 * (self.predicted.iteration_us / self.replayed.iteration_us - 1), 3)
                if self.replayed.iteration_us
                else 0.0,
            },
            "retimed": [r.as_dict() for r in self.retimed],
            "seconds": round(self.seconds, 3),
            "notes": self.notes,
        }


# ---------------------------------------------------------------------------------------------- API


def estimate(
    job: Job,
    config: JobConfig | dict[str, Any] | None = None,
    *,
    baseline: Baseline | None = None,
    progress: Progress = no_progress,
    graph: ExecutionGraph | None = None,
) -> EstimateResult:
    """Predict ``config`` (a JobConfig, or a dict of changes to the inferred baseline) from ``job``."""
    t0 = time.perf_counter()
    baseline = baseline or infer_baseline(job)
    if config is None:
        config = baseline.config
    elif isinstance(config, dict):
        config = baseline.config.with_changes(**config)
    check(config, baseline)
    progress(0.02, "building the execution graph")
    graph = graph or build_graph(job, progress=scaled(progress, 0.02, 0.4))
    ranks = {t.rank: t for t in job.ranks}
    base = baseline.config

    progress(0.45, "replaying the traced configuration")
    start0, end0 = simulate(graph)
    replayed_tl = [predicted_rank(graph, t, start0, end0) for t in job.ranks]
    measured = _outcome(base, job.ranks)
    replayed = _outcome(base, replayed_tl)

    progress(0.55, "rewriting the graph")
    notes: list[str] = []
    structural = (
        config.pp != base.pp
        or config.microbatches != base.microbatches
        or (config.layers is not None and config.layers != base.layers)
        or (base.dp == 1 and config.dp > 1 and not _has_collectives(job))
    )
    model = comm_model_from_trace(job, graph, get_gpu(base.gpu))
    timeline, why, old_dur = [], {}, {}
    if structural:
        from lumos_core.whatif.rewrite import (
            build_rewritten,  # pipeline / microbatch / layer changes rebuild the graph
        )
        from lumos_core.whatif.rewrite_timeline import rewritten_timelines

        rw = build_rewritten(job, graph, baseline, config, notes)
        plan = plan_retiming(job, rw.graph, baseline, config, notes, model)
        created = np.flatnonzero((rw.graph.event < 0) & (rw.graph.node_type == NodeType.GPU))
        plan.apply(created, 1.0, "PP send/recv", "alpha-beta of the activation size (created by the rewrite)")
        dur = np.maximum(np.rint(rw.graph.dur * plan.ratio), 0).astype(np.int64)
        progress(0.7, f"simulating {rw.graph.n_nodes} tasks")
        start, end = simulate(rw.graph, dur, _lags(rw.graph, plan))
        progress(0.9, "building the predicted timeline")
        timeline, rows = rewritten_timelines(rw, start, end, ranks)
        for p in timeline:
            node = rows[p.rank]
            has = node >= 0
            w = np.full(len(p), -1, np.int32)
            w[has] = plan.why[node[has]]
            why[p.rank] = w
            od = np.zeros(len(p), np.int64)
            od[has] = rw.graph.dur[node[has]]
            old_dur[p.rank] = od
        represents = rw.represents
    else:
        layout = _replica_layout(job, base, config)
        plan = plan_retiming(job, graph, baseline, config, notes, model)
        dur = np.maximum(np.rint(graph.dur * plan.ratio), 0).astype(np.int64)
        progress(0.7, f"simulating {graph.n_nodes} tasks")
        start, end = simulate(graph, dur, _lags(graph, plan))
        progress(0.9, "building the predicted timeline")
        for t in job.ranks:
            if t.rank not in layout:
                continue
            p = predicted_rank(graph, t, start, end)
            node_of = graph.rank_nodes[t.rank]
            w = np.full(len(t), -1, np.int32)
            has = node_of >= 0
            w[has] = plan.why[node_of[has]]
            p.rank = layout[t.rank][0]
            timeline.append(p)
            why[p.rank] = w
            old_dur[p.rank] = t.dur.copy()
        represents = {layout[r][0]: layout[r] for r in layout}
    predicted = _outcome(config, timeline)
    _note_cpu_bound(replayed, predicted, notes)
    progress(1.0, "estimate done")
    return EstimateResult(
        baseline=baseline,
        measured=measured,
        replayed=replayed,
        predicted=predicted,
        world_size=config.world_size,
        timeline=timeline,
        represents=represents,
        retimed=plan.rules,
        why=why,
        old_dur=old_dur,
        seconds=time.perf_counter() - t0,
        notes=notes,
    )


def _note_cpu_bound(replayed: Outcome, predicted: Outcome, notes: list[str]) -> None:
    """Say so when the GPU work changed but the iteration did not: the CPU (Python, launches) sets
    the pace, and the saving only shows as idle GPU time."""
    busy = lambda o: o.breakdown.exposed_compute_ns + o.breakdown.overlapped_ns + o.breakdown.exposed_comm_ns  # noqa: E731
    if not replayed.iteration_us or not busy(replayed):
        return
    it_change = predicted.iteration_us / replayed.iteration_us - 1
    busy_change = busy(predicted) / busy(replayed) - 1
    if abs(it_change) < 0.005 and abs(busy_change) > 0.02:
        notes.append(
            f"GPU busy time changes {100 * busy_change:+.1f}% but the iteration only {100 * it_change:+.2f}%: "
            "the CPU thread (Python and launch calls) sets the pace of this job, so faster or slower "
            "GPU work mostly changes idle GPU time (see the critical path in lumos replay --json)"
        )


def _has_collectives(job: Job) -> bool:
    return any(len(t.collectives) for t in job.ranks)


def _lags(graph: ExecutionGraph, plan: RetimePlan) -> np.ndarray | None:
    if plan.lag_ratio is None:
        return None
    return np.rint(graph.sp_lag * plan.lag_ratio).astype(np.int64)


def _outcome(config: JobConfig, ranks: list[RankTrace]) -> Outcome:
    """Steady-state iteration time and breakdown (see ESTIMATE_DEFINITION)."""
    per_rank: dict[int, float] = {}
    parts = np.zeros(4)
    n = 0
    for t in ranks:
        windows = iteration_windows(t)
        if len(windows) > 1:
            windows = windows[:-1]
        if not windows:
            continue
        s, e, c = activity(t)
        lengths = [w.length for w in windows]
        per_rank[t.rank] = float(np.mean(lengths)) / 1000
        for w in windows:
            b = breakdown(s, e, c, w.start, w.end)
            parts += (b.exposed_compute_ns, b.overlapped_ns, b.exposed_comm_ns, b.other_ns)
            n += 1
    if n == 0:
        return Outcome(config, 0.0, Breakdown(0, 0, 0, 0), per_rank)
    parts /= n
    bd = Breakdown(*(int(round(x)) for x in parts))
    return Outcome(config, float(np.mean(list(per_rank.values()))), bd, per_rank)


def _replica_layout(job: Job, base: JobConfig, config: JobConfig) -> dict[int, list[int]]:
    """Traced rank -> the ranks of the new job it stands for. Ranks are numbered as Megatron does
    (tensor-parallel fastest, then data-parallel, then pipeline); a new rank is a copy of the traced
    rank in the same pipeline stage with its tensor- and data-parallel position folded onto the
    traced ones (replicas run the same work)."""
    out: dict[int, list[int]] = {}
    traced = {t.rank for t in job.ranks}
    for new in range(config.world_size):
        t_new = new % config.tp
        d_new = (new // config.tp) % config.dp
        p_new = new // (config.tp * config.dp)
        src = (t_new % base.tp) + base.tp * ((d_new % base.dp) + base.dp * p_new)
        if src in traced:
            out.setdefault(src, []).append(new)
    return out


# ------------------------------------------------------------------------------------ re-timing rules


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


def plan_retiming(
    job: Job,
    graph: ExecutionGraph,
    baseline: Baseline,
    config: JobConfig,
    notes: list[str],
    model: costs.CommModel | None = None,
) -> RetimePlan:
    """Duration ratios for every node of ``graph`` (see :mod:`lumos_core.whatif.retime`)."""
    base = baseline.config
    plan = RetimePlan.identity(graph.n_nodes)
    gpu_old = get_gpu(base.gpu)
    gpu_new = _with_links(get_gpu(config.gpu), config)
    ranks = {t.rank: t for t in job.ranks}
    fam = family_of_nodes(graph, ranks)
    has_gpu = any(np.isin(t.kind, [Kind.KERNEL]).any() for t in job.ranks)
    task = (graph.node_type == NodeType.GPU) if has_gpu else (graph.node_type == NodeType.CPU)
    task &= graph.arrive_of < 0  # collective transfers are re-timed by the communication model
    model = model or comm_model_from_trace(job, graph, gpu_old)

    # --- model shape: tokens, hidden, FFN ---
    tok_ratio = _ratio(config.seq, base.seq) * _ratio(config.micro_batch, base.micro_batch)
    # Widths a hidden/FFN change moves, at the trace's TP (sharded widths included); the TP split
    # itself divides every layer GEMM's work (Megatron splits QKV/FFN columns and the projection
    # rows, and the LM head by vocabulary).
    sizes = width_map(base, dataclasses.replace(config, tp=base.tp))
    h_ratio = _ratio(config.hidden, base.hidden)
    shape_change = tok_ratio != 1.0 or bool(sizes) or config.tp != base.tp
    if shape_change and has_gpu:
        _retime_compute(job, graph, plan, fam, task, base, config, sizes, tok_ratio, h_ratio, gpu_old)
    elif shape_change:
        _retime_cpu_ops(graph, plan, ranks, base, config, sizes, tok_ratio, h_ratio)

    if has_gpu and base.tp == 1 and config.tp > 1:
        _add_tp_allreduces(job, graph, plan, fam, task, baseline, config, gpu_new, tok_ratio, notes)

    # --- hardware ---
    if gpu_new.name != gpu_old.name and has_gpu:
        ratio = hardware_ratio(fam, gpu_old, gpu_new)
        for f, label, what in (
            (_compute_fams(), "peak FLOP/s", "compute-bound kernels"),
            (_memory_fams(), "HBM bandwidth", "memory-bound kernels"),
        ):
            sel = np.flatnonzero(task & np.isin(fam, f))
            plan.apply(
                sel, ratio[sel], what, f"roofline: ratio of {label}", f"{gpu_old.name} -> {gpu_new.name}"
            )

    # --- communication: group sizes, message sizes, links ---
    _retime_collectives(
        job, graph, plan, baseline, config, model, gpu_old, gpu_new, tok_ratio, h_ratio, notes
    )
    return plan


def _add_tp_allreduces(
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
    and each is followed by the all-reduce's alpha-beta time at the new TP size; one backward GEMM
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
    shapes = _gemm_shapes_of_nodes(job, graph, gemm)
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
        "alpha-beta after each row-parallel GEMM (and input-gradient GEMM), on the compute stream",
        f"{nbytes / 2**20:.1f} MiB over {config.tp} GPUs, {seconds * 1e6:.0f} µs each",
    )


def _compute_fams() -> list[int]:
    return [int(Family.GEMM), int(Family.ATTENTION)]


def _memory_fams() -> list[int]:
    return [
        int(Family.ELEMENTWISE),
        int(Family.REDUCTION),
        int(Family.KERNEL_OTHER),
        int(Family.MEMCPY),
        int(Family.MEMSET),
    ]


def _ratio(new: float | None, old: float | None) -> float:
    return float(new) / float(old) if new and old else 1.0


def _with_links(gpu: GpuProfile, config: JobConfig) -> GpuProfile:
    import dataclasses

    changes: dict[str, float] = {}
    if config.nvlink_gbps:
        changes["nvlink_bandwidth"] = config.nvlink_gbps * 1e9
    if config.network_gbps:
        changes["network_bandwidth"] = config.network_gbps * 1e9
    return dataclasses.replace(gpu, **changes) if changes else gpu


def _retime_compute(
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
) -> None:
    """GEMMs by their recorded shapes, attention by FLOPs, elementwise by bytes."""
    tp_ratio = base.tp / config.tp
    gemm = np.flatnonzero(task & (fam == Family.GEMM))
    shaped = _gemm_shapes_of_nodes(job, graph, gemm)
    by_shape: dict[tuple[int, int, int], list[int]] = {}
    unshaped: list[int] = []
    for v, shape in zip(gemm.tolist(), shaped):
        (by_shape.setdefault(shape, []) if shape else unshaped).append(v)  # type: ignore[arg-type]
    for shape, nodes in by_shape.items():
        r = gemm_ratio(shape, sizes, tok_ratio, gpu, gpu) * tp_ratio
        plan.apply(
            np.asarray(nodes),
            r,
            "GEMM",
            "FLOPs of the recorded shape, roofline efficiency" + (" / TP" if tp_ratio != 1 else ""),
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
    heads_ratio = _ratio(config.heads, base.heads) if config.heads and base.heads else 1.0
    att = np.flatnonzero(task & (fam == Family.ATTENTION))
    seq_ratio = _ratio(config.seq, base.seq)
    mb_ratio = _ratio(config.micro_batch, base.micro_batch)
    plan.apply(
        att,
        mb_ratio * seq_ratio * seq_ratio * h_ratio * tp_ratio,
        "attention",
        "FLOPs ∝ micro-batch · seq² · hidden / TP",
        f"heads x{heads_ratio:g}" if heads_ratio != 1 else "",
    )
    ew = np.flatnonzero(task & np.isin(fam, _memory_fams()))
    # Elementwise kernels scale with the tensors they touch: the launching op's recorded input shapes
    # say which dimensions those are (a layer norm over hidden is not sharded by TP; a GELU over the
    # FFN is). Without shapes, tokens x hidden (/ TP).
    values = value_map(base, config)
    by_ratio: dict[float, list[int]] = {}
    fallback: list[int] = []
    for v, dims in zip(ew.tolist(), _launching_op_dims(job, graph, ew)):
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


def _launching_op_dims(job: Job, graph: ExecutionGraph, nodes: np.ndarray) -> list[Any]:
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


def _retime_cpu_ops(
    graph: ExecutionGraph,
    plan: RetimePlan,
    ranks: dict[int, RankTrace],
    base: JobConfig,
    config: JobConfig,
    sizes: dict[int, int],
    tok_ratio: float,
    h_ratio: float,
) -> None:
    """CPU-only traces: the operators themselves do the work (between and after their children), so
    each operator's tasks and its share of the CPU time between tasks scale together."""
    from lumos_core.whatif.baseline import gemm_shape

    mb_ratio = _ratio(config.micro_batch, base.micro_batch)
    seq_ratio = _ratio(config.seq, base.seq)
    values = value_map(base, config)
    rules: dict[int, tuple[str, str]] = {}

    def op_ratio(r: int, op: int, fam: Family) -> float:
        t = ranks[r]
        if fam == Family.GEMM:
            shape = gemm_shape(t.name_of(op), t.args_of(op).get("Input Dims"))
            if shape:
                rules[op] = ("GEMM (CPU)", "FLOPs of the recorded shape")
                return gemm_flop_ratio(shape, sizes, tok_ratio)
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


def _gemm_shapes_of_nodes(
    job: Job, graph: ExecutionGraph, nodes: np.ndarray
) -> list[tuple[int, int, int] | None]:
    """(M, K, N) of each GEMM node: its own Input Dims (CPU op) or those of the op that launched it."""
    from lumos_core.whatif.baseline import gemm_shape

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


def _retime_collectives(
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
    from lumos_core.whatif.baseline import group_roles

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
        span_old = spans_nodes(n_old, stride_old.get(role, 1), gpn_old)
        span_new = spans_nodes(n_new, stride_new.get(role, 1), gpn_new)
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
