"""Re-time tasks for a new configuration: how long would this kernel (or CPU op) take?

Each rule returns, per graph node, a duration ratio (new / measured) and records *why*: which
model, from what. Ratios, not absolute model times, are applied to the measured durations, so the
trace's own efficiency stays in every prediction and the models only say how it scales:

* GEMM: FLOPs from the recorded shapes (``Input Dims`` of the op that launched the kernel, or of
  the CPU op itself on CPU-only traces) with hidden/FFN/token sizes substituted; roofline
  efficiency of the old and new shapes (:mod:`lumos_core.costs`) so small GEMMs do not scale
  linearly. Without shapes: the per-layer GEMM FLOPs formula.
* attention: FLOPs ∝ micro-batch · seq² · hidden.
* elementwise, normalisation, reductions, copies: bytes ∝ tokens · hidden.
* collectives: the alpha-beta model of :mod:`lumos_core.costs`, calibrated on the trace's own
  collectives, at the new group size, message size and node span.
* hardware: compute-bound work by the ratio of peak FLOP/s, memory-bound work by the ratio of
  memory bandwidth, communication by link bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import costs
from .config import JobConfig
from .graph import ExecutionGraph
from .hardware import GpuProfile
from .kernel_families import Family, classify_names
from .trace import CollectiveKind, Kind, RankTrace

_GEMM_OPS = {
    "aten::mm",
    "aten::addmm",
    "aten::linear",
    "aten::matmul",
    "aten::bmm",
    "nanogpt::mm",
    "aten::_scaled_mm",
}
_COMPUTE_BOUND = (Family.GEMM, Family.ATTENTION)
_MEMORY_BOUND = (Family.ELEMENTWISE, Family.REDUCTION, Family.KERNEL_OTHER, Family.MEMCPY, Family.MEMSET)


@dataclass
class Retiming:
    """A group of tasks re-timed the same way (reported to the user)."""

    what: str
    model: str
    count: int = 0
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"what": self.what, "model": self.model, "count": self.count, "detail": self.detail}


@dataclass
class RetimePlan:
    """Per-node duration ratios and, per node, the index of the Retiming that set it (-1: none)."""

    ratio: np.ndarray
    why: np.ndarray
    rules: list[Retiming] = field(default_factory=list)

    @classmethod
    def identity(cls, n: int) -> RetimePlan:
        return cls(np.ones(n), np.full(n, -1, np.int32))

    def apply(
        self, nodes: np.ndarray, ratio: np.ndarray | float, what: str, model: str, detail: str = ""
    ) -> None:
        """Multiply the ratio of ``nodes`` and attribute them to a (shared) rule."""
        nodes = np.asarray(nodes, np.int64)
        if len(nodes) == 0:
            return
        key = (what, model, detail)
        for i, r in enumerate(self.rules):
            if (r.what, r.model, r.detail) == key:
                idx = i
                break
        else:
            idx = len(self.rules)
            self.rules.append(Retiming(what, model, 0, detail))
        self.ratio[nodes] *= ratio
        self.why[nodes] = idx
        self.rules[idx].count += len(nodes)


def gemm_ratio(
    shape: tuple[int, int, int],
    sizes: dict[int, int],
    token_ratio: float,
    gpu_old: GpuProfile,
    gpu_new: GpuProfile,
    dtype_bytes: int = 2,
) -> float:
    """New/old time of a GEMM whose dims change: widths in ``sizes`` (old -> new), rows x token_ratio."""
    m, k, n = shape
    m2 = max(1, round(m * token_ratio))
    k2, n2 = sizes.get(k, k), sizes.get(n, n)
    # Backward GEMMs have tokens as their contraction dim (weight gradient: [k, tokens] x [tokens, n]).
    if sizes.get(m) is not None and k not in sizes:
        m2, k2 = sizes[m], max(1, round(k * token_ratio))
    old = costs.gemm_time(m, n, k, gpu_old, dtype_bytes=dtype_bytes)
    new = costs.gemm_time(m2, n2, k2, gpu_new, dtype_bytes=dtype_bytes)
    return new / old if old > 0 else 1.0


def width_map(base: JobConfig, new: JobConfig) -> dict[int, int]:
    """Old width -> new width for every dimension a hidden/FFN/TP change moves (sharded ones too)."""
    sizes: dict[int, int] = {}
    h, h2 = base.hidden, new.hidden or base.hidden
    f, f2 = base.ffn, new.ffn or base.ffn
    tp, tp2 = base.tp, new.tp
    if h and h2:
        for mult in (1, 2, 3):
            for div in {1, tp}:
                w = mult * h // div
                if w * div == mult * h:
                    sizes[w] = max(
                        1, mult * h2 * div // (div * (tp2 if div > 1 else 1)) if div > 1 else mult * h2
                    )
        if tp != tp2:  # sharded widths: hidden/tp -> hidden'/tp'
            sizes[3 * h // tp] = 3 * h2 // tp2
            sizes[h // tp] = h2 // tp2
    if f and f2:
        sizes[f] = f2 if tp == 1 and tp2 == 1 else sizes.get(f, f2)
        sizes[f // tp] = f2 // tp2
        if tp == 1:
            sizes[f] = f2 // tp2 if tp2 > 1 else f2
    return {k: v for k, v in sizes.items() if k != v}


def layer_gemm_flops(hidden: int, ffn: int) -> float:
    """GEMM FLOPs per token of one transformer layer (QKV, projection, two MLP matmuls) / 2."""
    return 4 * hidden * hidden + 2 * hidden * ffn


def family_of_nodes(graph: ExecutionGraph, ranks: dict[int, RankTrace]) -> np.ndarray:
    """Family per graph node (CPU ops classified by op name, GPU tasks by kernel name)."""
    fam = np.full(graph.n_nodes, int(Family.OTHER), np.int16)
    for r, t in ranks.items():
        names = classify_names(t.strings)
        cpu_names = _cpu_op_families(t.strings)
        sel = np.flatnonzero((graph.rank == r) & (graph.event >= 0))
        ev = graph.event[sel]
        gpu = np.isin(t.kind[ev], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
        fam[sel[gpu]] = names[t.name[ev[gpu]]]
        fam[sel[~gpu]] = cpu_names[t.name[ev[~gpu]]]
    return fam


def _cpu_op_families(strings: list[str]) -> np.ndarray:
    out = np.full(len(strings), int(Family.CPU_OP), np.int16)
    for i, s in enumerate(strings):
        low = s.lower()
        if s in _GEMM_OPS:
            out[i] = Family.GEMM
        elif "scaled_dot_product" in low or "attention" in low or "flash" in low:
            out[i] = Family.ATTENTION
        elif low.startswith("aten::") and any(
            w in low
            for w in (
                "norm",
                "gelu",
                "relu",
                "softmax",
                "add",
                "mul",
                "div",
                "sub",
                "copy_",
                "dropout",
                "silu",
                "tanh",
                "exp",
                "fill_",
                "zero_",
                "where",
                "cat",
                "embedding",
            )
        ):
            out[i] = Family.ELEMENTWISE
    return out


def collective_ratio(
    kind: int,
    size_bytes: float,
    n_old: int,
    n_new: int,
    span_old: bool,
    span_new: bool,
    size_ratio: float,
    gpu_old: GpuProfile,
    gpu_new: GpuProfile,
    model: costs.CommModel | None = None,
) -> float:
    """New/old time of a collective: its message scaled by size_ratio, its group resized, maybe a new GPU."""
    if n_new <= 1:
        return 0.0  # a group of one moves no data
    kind_e = CollectiveKind(int(kind))
    size = max(float(size_bytes), 1.0) if size_bytes > 0 else 1 << 20
    if model is not None:
        old = model.time(kind_e, size, max(n_old, 2), inter_node=span_old)
        new = model.time(kind_e, size * size_ratio, n_new, inter_node=span_new)
    else:
        old = costs.collective_time(kind_e, size, max(n_old, 2), gpu_old, inter_node=span_old)
        new = costs.collective_time(kind_e, size * size_ratio, n_new, gpu_new, inter_node=span_new)
    if gpu_old.name != gpu_new.name:
        lo = costs.link_params(gpu_old, span_new)
        ln = costs.link_params(gpu_new, span_new)
        new *= lo.bandwidth / ln.bandwidth if ln.bandwidth > 0 else 1.0
    return new / old if old > 0 else 1.0


def hardware_ratio(family: np.ndarray, gpu_old: GpuProfile, gpu_new: GpuProfile) -> np.ndarray:
    """Per-family time ratio when moving compute from one GPU to another."""
    out = np.ones(len(family))
    flops = _peak(gpu_old) / _peak(gpu_new)
    mem = gpu_old.hbm_bandwidth / gpu_new.hbm_bandwidth
    out[np.isin(family, _COMPUTE_BOUND)] = flops
    out[np.isin(family, _MEMORY_BOUND)] = mem
    return out


def _peak(gpu: GpuProfile) -> float:
    for name in ("peak_bf16_flops", "bf16_flops", "peak_flops"):
        v = getattr(gpu, name, None)
        if v:
            return float(v)
    raise AttributeError("GpuProfile has no bf16 peak")


def spans_nodes(group_size: int, stride: int, gpus_per_node: int) -> bool:
    """Do ``group_size`` ranks spaced ``stride`` apart (Megatron's order) cover more than one node?"""
    return group_size > 1 and (group_size - 1) * stride >= gpus_per_node


def safe_ratio(a: float | None, b: float | None) -> float:
    if not a or not b:
        return 1.0
    r = a / b
    return r if math.isfinite(r) and r > 0 else 1.0
