"""Re-time tasks for a new configuration: how long would this kernel (or CPU op) take?

Each rule returns, per graph node, a duration ratio (new / measured) and records *why*: which
model, from what. Ratios, not absolute model times, are applied to the measured durations, so the
trace's own efficiency stays in every prediction and the models only say how it scales:

* GEMM: FLOPs from the recorded shapes (``Input Dims`` of the op that launched the kernel, or of
  the CPU op itself on CPU-only traces) with hidden/FFN/token sizes substituted; roofline
  efficiency of the old and new shapes (:mod:`lumos_core.perf.costs`) so small GEMMs do not scale
  linearly. Without shapes: the per-layer GEMM FLOPs formula.
* attention: FLOPs ∝ micro-batch · seq² · hidden.
* elementwise, normalisation, reductions, copies: bytes ∝ tokens · hidden.
* collectives: the alpha-beta model of :mod:`lumos_core.perf.costs`, calibrated on the trace's own
  collectives, at the new group size, message size and node span.
* hardware: compute-bound work by the ratio of peak FLOP/s, memory-bound work by the ratio of
  memory bandwidth, communication by link bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.graph.build import ExecutionGraph, NodeType
from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.trace.kernel_families import GEMM_OPS, Family, classify_names
from lumos_core.trace.model import CollectiveKind, Kind, RankTrace
from lumos_core.whatif.config import JobConfig

_COMPUTE_BOUND = (Family.GEMM, Family.ATTENTION)
# ATen ops that only make views or read metadata: their cost does not grow with tensor size.
_VIEW_OPS = frozenset(
    {
        "empty",
        "empty_strided",
        "empty_like",
        "view",
        "reshape",
        "_unsafe_view",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "expand",
        "slice",
        "select",
        "squeeze",
        "unsqueeze",
        "split",
        "split_with_sizes",
        "chunk",
        "narrow",
        "detach",
        "detach_",
        "alias",
        "resolve_conj",
        "resolve_neg",
        "item",
        "_local_scalar_dense",
        "is_nonzero",
        "size",
        "stride",
        "contiguous",
        "to",
        "lift_fresh",
        "unbind",
        "flatten",
        "view_as",
        "result_type",
        "set_",
        "record_stream",
        "zeros_like",
        "ones_like",
        "arange",
        "scalar_tensor",
    }
)
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
    """Per-node duration ratios and, per node, the index of the Retiming that set it (-1: none);
    ``lag_ratio`` scales same-thread lags (CPU time between tasks, on CPU-only traces)."""

    ratio: np.ndarray
    why: np.ndarray
    rules: list[Retiming] = field(default_factory=list)
    lag_ratio: np.ndarray | None = None

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


def gemm_flop_ratio(shape: tuple[int, int, int], sizes: dict[int, int], token_ratio: float) -> float:
    """New/old FLOPs of a GEMM (CPU GEMMs run at a steady fraction of peak: FLOPs set the time)."""
    m, k, n = shape
    m2, k2, n2 = m * token_ratio, sizes.get(k, k), sizes.get(n, n)
    if sizes.get(m) is not None and k not in sizes:  # weight gradient: tokens are the contraction
        m2, k2 = sizes[m], k * token_ratio
    return (m2 * k2 * n2) / (m * k * n)


def value_map(base: JobConfig, new: JobConfig) -> dict[int, int]:
    """Old -> new value of every tensor dimension the configuration change moves (hidden, FFN, seq,
    micro-batch, tokens, head dim, TP shards). Values that two changed dimensions share are
    ambiguous and left out."""
    pairs: list[tuple[int | None, int | None]] = []
    h, h2 = base.hidden, new.hidden or base.hidden
    pairs += [
        (h, h2),
        (base.ffn, new.ffn or base.ffn),
        (base.seq, new.seq or base.seq),
        (base.micro_batch, new.micro_batch or base.micro_batch),
    ]
    if base.seq and base.micro_batch:
        pairs.append(
            (base.seq * base.micro_batch, (new.seq or base.seq) * (new.micro_batch or base.micro_batch))
        )
    if h and base.heads:
        pairs.append((h // base.heads, (h2 or h) // (new.heads or base.heads)))
    if base.tp != new.tp or base.tp > 1:
        for a, b in list(pairs):
            if a and b and a % base.tp == 0:
                pairs.append((a // base.tp, b // new.tp))
    out: dict[int, int] = {}
    bad: set[int] = set()
    for a, b in pairs:
        if not a or not b or a == b:
            continue
        if a in out and out[a] != b:
            bad.add(a)
        out[a] = b
    return {k: v for k, v in out.items() if k not in bad}


def dims_ratio(dims: Any, values: dict[int, int]) -> float | None:
    """New/old element count of an op's inputs (all of them, nested lists of tensors included: the
    optimizer's ``_foreach_*`` ops take a list per argument), dimensions mapped by ``values``."""
    old = new = 0
    stack = [dims]
    while stack:
        d = stack.pop()
        if not isinstance(d, list) or not d:
            continue
        if all(isinstance(x, int) for x in d):
            if all(x > 0 for x in d):
                old += math.prod(d)
                new += math.prod(values.get(x, x) for x in d)
        else:
            stack.extend(d)
    return new / old if old else None


def width_map(base: JobConfig, new: JobConfig) -> dict[int, int]:
    """Old width -> new width of the weight dimensions a hidden/FFN/TP change moves: hidden, 3 x
    hidden (fused QKV), FFN, and their tensor-parallel shards (Megatron splits QKV and FFN columns
    and the projection rows). A value two different widths share is ambiguous and left out."""
    h, h2 = base.hidden, new.hidden or base.hidden
    f, f2 = base.ffn, new.ffn or base.ffn
    tp, tp2 = base.tp, new.tp
    pairs: list[tuple[int, int]] = []
    if h and h2:
        pairs += [(h, h2), (3 * h, 3 * h2)]
        if tp > 1 or tp2 > 1:
            pairs += [(h // tp, h2 // tp2), (3 * h // tp, 3 * h2 // tp2)]
    if f and f2:
        pairs.append((f, f2))
        if tp > 1 or tp2 > 1:
            pairs.append((f // tp, f2 // tp2))
    out: dict[int, int] = {}
    bad: set[int] = set()
    for a, b in pairs:
        if a in out and out[a] != b:
            bad.add(a)
        out[a] = b
    return {k: v for k, v in out.items() if k not in bad and k != v}


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
        if s in GEMM_OPS:
            out[i] = Family.GEMM
        elif "scaled_dot_product" in low or "attention" in low or "flash" in low:
            out[i] = Family.ATTENTION
        elif low.startswith("aten::") and low.split("::", 1)[1] not in _VIEW_OPS:
            out[i] = Family.ELEMENTWISE  # every other ATen op touches its tensors' elements
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


# ------------------------------------------------------------------------------ CPU-only traces


def _effective_ops(t: RankTrace, retimable: np.ndarray) -> np.ndarray:
    """Per event: itself if re-timable, else its nearest re-timable ancestor, else -1."""
    eff = np.where(retimable[t.name], np.arange(len(t)), -1)
    # Parents come before their children in lane order; a few passes settle every nesting level.
    for _ in range(int(t.depth.max()) + 1 if len(t) else 0):
        todo = (eff < 0) & (t.parent >= 0)
        if not todo.any():
            break
        eff[todo] = eff[t.parent[todo]]
    return eff


def _innermost_containing(t: RankTrace, a: int, b: int) -> int:
    """The innermost event on a's lane that contains the middle of the gap between a and b."""
    mid = (int(t.start[a] + t.dur[a]) + int(t.start[b])) // 2
    p = a
    while p >= 0 and int(t.start[p] + t.dur[p]) <= mid:
        p = int(t.parent[p])
    q = b
    while q >= 0 and int(t.start[q]) > mid:
        q = int(t.parent[q])
    if p < 0:
        return q
    if q < 0:
        return p
    return p if t.depth[p] >= t.depth[q] else q


def cpu_op_ratios(
    graph: ExecutionGraph, ranks: dict[int, RankTrace], op_ratio
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a CPU-only trace, where operators do their work between their children: per node and per
    same-thread edge (the CPU time before a task), the ratio of the operator that time belongs to.

    ``op_ratio(rank, event, family) -> (ratio, rule key)`` rates one operator. Returns node ratios,
    edge ratios and, per node, the operator event behind its ratio (-1: none)."""
    node_ratio = np.ones(graph.n_nodes)
    node_op = np.full(graph.n_nodes, -1, np.int64)
    edge_ratio = np.ones(len(graph.sp_src))
    cache: dict[tuple[int, int], float] = {}
    fams = {r: _cpu_op_families(t.strings) for r, t in ranks.items()}
    retimable = {r: np.isin(f, [Family.GEMM, Family.ATTENTION, Family.ELEMENTWISE]) for r, f in fams.items()}
    eff = {r: _effective_ops(t, retimable[r]) for r, t in ranks.items()}

    def ratio_of(r: int, op: int) -> float:
        key = (r, op)
        if key not in cache:
            cache[key] = op_ratio(r, op, Family(int(fams[r][int(ranks[r].name[op])])))
        return cache[key]

    cpu = np.flatnonzero((graph.node_type == NodeType.CPU) & (graph.event >= 0))
    for v in cpu.tolist():
        r, e = int(graph.rank[v]), int(graph.event[v])
        op = int(eff[r][e])
        if op >= 0:
            node_ratio[v] = ratio_of(r, op)
            node_op[v] = op
    dst = graph.sp_dst
    same = np.flatnonzero(
        (graph.sp_kind == 0)
        & (graph.event[graph.sp_src] >= 0)
        & (graph.event[dst] >= 0)
        & (graph.rank[graph.sp_src] == graph.rank[dst])
    )
    for j in same.tolist():
        u, v = int(graph.sp_src[j]), int(dst[j])
        r = int(graph.rank[u])
        t = ranks[r]
        a, b = int(graph.event[u]), int(graph.event[v])
        if t.lane[a] != t.lane[b] or graph.sp_lag[j] <= 0:
            continue
        owner = _innermost_containing(t, a, b)
        op = int(eff[r][owner]) if owner >= 0 else -1
        if op >= 0:
            edge_ratio[j] = ratio_of(r, op)
    return node_ratio, edge_ratio, node_op
