"""``lumos calibrate RUNS...``: fit a hardware profile (:mod:`lumos_core.perf.profile`) on measured
jobs of one cluster.

Samples come from the steady-state iterations of every rank of every run:

* GEMMs: the innermost GEMM operator with recorded ``Input Dims`` (2·M·K·N FLOPs) and its time: on
  GPU jobs the GEMM kernels it launched, on CPU-only jobs the operator itself.
* attention: forward ``scaled_dot_product_attention`` calls with a [b, h, s, d] input
  (4·b·h·s²·d FLOPs); elementwise: innermost elementwise operators (elements of their inputs).
* collectives: one sample per collective instance (the shortest kernel across ranks), fitted with
  the NCCL model per link class, and an alpha-beta line per link class and kind.
* launches: kernel launch calls; point-to-point: send/recv of 64 KiB or less.

The fit is in-sample: residuals say how well one rate per class describes the samples it was fitted
on. Whether the profile predicts other runs is what ``lumos validate --profile`` checks (fit on some
runs, validate on a held-out one).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.compare.summary import is_gpu_job
from lumos_core.errors import LumosError
from lumos_core.graph.build import build_graph
from lumos_core.perf.collective_kinds import bus_factor
from lumos_core.perf.hardware import get_gpu
from lumos_core.perf.nccl import NcclModel
from lumos_core.perf.nccl.model import CollectiveSample
from lumos_core.perf.profile import AlphaBeta, GemmClass, HardwareProfile, gemm_class
from lumos_core.progress import Progress, no_progress
from lumos_core.replay.breakdown import steady_windows
from lumos_core.trace.kernel_families import GEMM_OPS, Family, event_families
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, CollectiveKind, Job, Kind, RankTrace
from lumos_core.whatif.baseline import gemm_shape
from lumos_core.whatif.retime.comm import collective_samples, trace_gpus_per_node
from lumos_core.whatif.retime.families import cpu_op_families

_LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel")
_P2P_MAX_BYTES = 64 * 1024


@dataclass
class Samples:
    gemm: list[tuple[float, float]] = field(default_factory=list)  # (FLOPs, seconds)
    attention: list[tuple[float, float]] = field(default_factory=list)
    elementwise: list[tuple[float, float]] = field(default_factory=list)  # (elements, seconds)
    collectives: list[CollectiveSample] = field(default_factory=list)
    launch_us: list[float] = field(default_factory=list)
    p2p_us: list[float] = field(default_factory=list)


@dataclass
class Calibration:
    profile: HardwareProfile
    samples: Samples
    residuals: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        s = self.samples
        return {
            "profile": self.profile.as_dict(),
            "samples": {
                "gemm": len(s.gemm),
                "attention": len(s.attention),
                "elementwise": len(s.elementwise),
                "collectives": len(s.collectives),
                "launch": len(s.launch_us),
                "p2p": len(s.p2p_us),
            },
            "residuals": self.residuals,
            "residual_definition": "in-sample: median |measured / fitted time - 1| over the samples, %",
        }


def _innermost(t: RankTrace, mask: np.ndarray) -> np.ndarray:
    """Events of ``mask`` with no descendant in ``mask`` on their lane (via the parent column)."""
    has_child = np.zeros(len(t), bool)
    idx = np.flatnonzero(mask & (t.parent >= 0))
    anc = t.parent[idx].astype(np.int64)
    # mark every ancestor of a masked event: walk up a few levels at once
    for _ in range(int(t.depth.max(initial=0)) + 1):
        ok = anc >= 0
        if not ok.any():
            break
        has_child[anc[ok]] = True
        anc = np.where(ok, t.parent[np.maximum(anc, 0)], -1)
    return mask & ~has_child


def _in_steady(t: RankTrace) -> np.ndarray:
    win = steady_windows(t)
    if not win:
        return np.zeros(len(t), bool)
    lo, hi = win[0].start, win[-1].end
    return (t.start >= lo) & (t.start < hi)


def _dims_elements(dims: Any) -> int | None:
    if not isinstance(dims, list):
        return None
    n = 0
    for d in dims:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            n += int(np.prod(d))
    return n or None


def _gemm_op_of(t: RankTrace, e: int, gemm_name: np.ndarray) -> int:
    """The nearest GEMM operator above the runtime call that launched GPU event ``e`` (-1: none)."""
    launch = int(t.launch[e])
    op = int(t.parent[launch]) if launch >= 0 else -1
    while op >= 0 and not gemm_name[t.name[op]]:
        op = int(t.parent[op])
    return op


def collect(job: Job, samples: Samples, max_events_per_rank: int = 200_000) -> None:
    """Add ``job``'s samples to ``samples``."""
    gpu = is_gpu_job(job.ranks)
    for t in job.ranks:
        inside = _in_steady(t)
        gemm_name = np.fromiter((s in GEMM_OPS for s in t.strings), bool, len(t.strings))
        cpu_fam = cpu_op_families(t.strings)
        ops = t.kind == Kind.CPU_OP
        if gpu:
            fam = event_families(t)
            kern = np.flatnonzero(inside & np.isin(t.kind, GPU_ACTIVITY_KINDS) & (fam == Family.GEMM))
            per_op: dict[int, float] = collections.defaultdict(float)
            for e in kern[:max_events_per_rank].tolist():
                op = _gemm_op_of(t, e, gemm_name)
                if op >= 0:
                    per_op[op] += t.dur[e] / 1e9
            for op, sec in per_op.items():
                _add_gemm(t, op, sec, samples)
            rt = np.flatnonzero(inside & (t.kind == Kind.RUNTIME))
            names = {i for i, s in enumerate(t.strings) if s in _LAUNCH}
            if names:
                sel = rt[np.isin(t.name[rt], list(names))]
                samples.launch_us += (t.dur[sel] / 1000).tolist()[:max_events_per_rank]
        else:
            g = np.flatnonzero(_innermost(t, ops & gemm_name[t.name]) & inside)
            for op in g[:max_events_per_rank].tolist():
                _add_gemm(t, op, t.dur[op] / 1e9, samples)
        # attention and elementwise from CPU operators (their own time on CPU-only jobs)
        if not gpu:
            att = ops & (cpu_fam[t.name] == Family.ATTENTION) & inside
            for op in np.flatnonzero(att)[:1000].tolist():
                name = t.name_of(op)
                if "backward" in name.lower() or "scaled_dot_product" not in name:
                    continue
                dims = t.args_of(op).get("Input Dims")
                if isinstance(dims, list) and dims and isinstance(dims[0], list) and len(dims[0]) == 4:
                    b, h, s, d = (int(x) for x in dims[0])
                    samples.attention.append((4.0 * b * h * s * s * d, t.dur[op] / 1e9))
            ew = np.flatnonzero(_innermost(t, ops & (cpu_fam[t.name] == Family.ELEMENTWISE)) & inside)
            for op in ew[:max_events_per_rank].tolist():
                n = _dims_elements(t.args_of(op).get("Input Dims"))
                if n and t.dur[op] > 0:
                    samples.elementwise.append((float(n), t.dur[op] / 1e9))
        c = t.collectives
        if len(c):
            p2p = np.isin(c.kind, [CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV])
            size = c.size_bytes
            small = p2p & (size >= 0) & (size <= _P2P_MAX_BYTES) & inside[c.event]
            samples.p2p_us += (t.dur[c.event[small]] / 1000).tolist()
    if gpu and any(len(t.collectives) for t in job.ranks):
        graph = build_graph(job)
        profile_gpu = (
            get_gpu(job.ranks[0].device_name) if _known(job.ranks[0].device_name) else get_gpu("H100")
        )
        samples.collectives += collective_samples(job, graph, trace_gpus_per_node(job, profile_gpu))


def _known(device: str) -> bool:
    try:
        get_gpu(device)
    except LumosError:
        return False
    return True


def _add_gemm(t: RankTrace, op: int, seconds: float, samples: Samples) -> None:
    shape = gemm_shape(t.name_of(op), t.args_of(op).get("Input Dims"))
    if shape and seconds > 0:
        m, k, n = shape
        samples.gemm.append((2.0 * m * k * n, seconds))


def _rate(pts: list[tuple[float, float]]) -> float:
    work = sum(w for w, _ in pts)
    secs = sum(s for _, s in pts)
    return work / secs if secs > 0 else 0.0


def _median_abs_pct(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.median(np.abs(meas / pred - 1.0)) * 100) if len(pred) else float("nan")


def _residual_at(pts: list[tuple[float, float]], rate: float) -> float:
    """How far the (work, seconds) samples are from running at ``rate`` (median, %)."""
    f = np.asarray([p[0] for p in pts])
    s = np.asarray([p[1] for p in pts])
    return _median_abs_pct(f / rate, s)


def _throughput(
    pts: list[tuple[float, float]],
    name: str,
    residuals: dict[str, Any],
    unconstrained: list[str],
    missing: str,
) -> float | None:
    """One rate for all samples, its residual kept under ``name``; None (and ``missing`` noted as
    unconstrained) when there is no sample or no time to fit."""
    rate = float(_rate(pts)) if pts else None
    if not rate:
        unconstrained.append(missing)
        return None
    residuals[name] = round(_residual_at(pts, rate), 2)
    return rate


def fit(jobs: Sequence[Job], progress: Progress = no_progress) -> Calibration:
    """Fit a hardware profile on ``jobs`` (runs of one cluster)."""
    if not jobs:
        raise LumosError("calibrate needs at least one run")
    devices = {j.ranks[0].device_name for j in jobs if j.ranks}
    if len(devices) > 1:
        raise LumosError(
            f"the runs ran on different devices ({', '.join(sorted(devices))}): a profile describes one cluster"
        )
    samples = Samples()
    for i, job in enumerate(jobs):
        progress(i / len(jobs), f"collecting samples from {job.path}")
        collect(job, samples)
    progress(0.9, "fitting")
    residuals: dict[str, Any] = {}
    unconstrained: list[str] = []
    # GEMM classes
    by_cls: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    for f, s in samples.gemm:
        by_cls[gemm_class(f)].append((f, s))
    classes = []
    for cls, pts in sorted(by_cls.items()):
        rate = _rate(pts)
        res = _residual_at(pts, rate)
        classes.append(
            GemmClass(cls=cls, flops_per_s=float(rate), samples=len(pts), residual_pct=round(res, 2))
        )
    if classes:
        f = np.asarray([p[0] for p in samples.gemm])
        s = np.asarray([p[1] for p in samples.gemm])
        prof_tmp = HardwareProfile(device="", gemm=tuple(classes))
        pred = np.asarray([x / (prof_tmp.gemm_rate(x) or 1.0) for x in f])
        residuals["gemm"] = round(_median_abs_pct(pred, s), 2)
        one = _rate(samples.gemm)
        residuals["gemm_one_rate"] = round(_residual_at(samples.gemm, one), 2)  # null model: one rate
    else:
        unconstrained.append("GEMM efficiency (no GEMM with recorded shapes)")
    att = _throughput(
        samples.attention,
        "attention",
        residuals,
        unconstrained,
        "attention throughput (no scaled_dot_product_attention with recorded inputs)",
    )
    ew = _throughput(
        samples.elementwise,
        "elementwise",
        residuals,
        unconstrained,
        "elementwise throughput (no elementwise operator with recorded shapes)",
    )
    comm = None
    ab: list[AlphaBeta] = []
    if samples.collectives:
        gpu = get_gpu(next(iter(devices))) if _known(next(iter(devices))) else get_gpu("H100")
        model = NcclModel.for_gpu(gpu).calibrate(samples.collectives)
        comm = model.params
        ab = _alpha_beta(samples.collectives)
        for scope in ("intra", "inter"):
            if not any(x.scope == scope for x in ab):
                unconstrained.append(f"collectives over {'the network' if scope == 'inter' else 'NVLink'}")
        residuals["collectives"] = {f"{a.scope} {a.kind}": a.residual_pct for a in ab}
    else:
        unconstrained.append("collectives, both link classes (no collective with a known size)")
    launch = float(np.median(samples.launch_us)) if samples.launch_us else None
    if launch is None:
        unconstrained.append("kernel launch overhead (no launch calls: CPU-only runs)")
    p2p = float(np.median(samples.p2p_us)) if samples.p2p_us else None
    if p2p is None:
        unconstrained.append("point-to-point overhead (no send/recv of <= 64 KiB)")
    profile = HardwareProfile(
        device=next(iter(devices)),
        runs=tuple(j.path for j in jobs),
        gemm=tuple(classes),
        attention_flops_per_s=att,
        elementwise_elems_per_s=ew,
        comm=comm,
        alpha_beta=tuple(ab),
        launch_overhead_us=launch,
        p2p_overhead_us=p2p,
        unconstrained=tuple(unconstrained),
        notes=(
            "used by estimate: GEMM rate per shape class (re-timed GEMMs), collective parameters when "
            "the job being estimated has no collectives of its own; attention/elementwise rates, "
            "alpha-beta lines, launch and p2p overheads are reported, not yet used",
        ),
    )
    progress(1.0, "calibrated")
    return Calibration(profile, samples, residuals)


def _alpha_beta(samples: list[CollectiveSample]) -> list[AlphaBeta]:
    groups: dict[tuple[str, str], list[CollectiveSample]] = collections.defaultdict(list)
    for s in samples:
        if s.seconds > 0 and s.size_bytes > 0 and s.shape.ranks > 1:
            groups[("inter" if s.shape.inter_node else "intra", CollectiveKind(s.kind).label)].append(s)
    out = []
    for (scope, kind), pts in sorted(groups.items()):
        x = np.asarray([s.size_bytes * bus_factor(s.kind, s.shape.ranks) for s in pts])
        y = np.asarray([s.seconds for s in pts])
        if len(set(x.tolist())) < 2:
            continue
        slope, icpt = np.polyfit(x, y, 1)
        if slope <= 0:
            continue
        alpha = max(float(icpt), 0.0)
        pred = alpha + x * slope
        out.append(
            AlphaBeta(
                scope=scope,
                kind=kind,
                alpha_us=round(alpha * 1e6, 3),
                beta_gbps=round(float(1.0 / slope / 1e9), 3),
                samples=len(pts),
                residual_pct=round(_median_abs_pct(pred, y), 2),
            )
        )
    return out
