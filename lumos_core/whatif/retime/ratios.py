"""Duration ratios (new / measured) from the performance models: GEMMs, element counts, collectives,
hardware."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.perf.kernel_curves import KernelCurve
from lumos_core.perf.nccl import GroupShape, NcclModel, Prediction
from lumos_core.trace.kernel_families import Family
from lumos_core.trace.model import CollectiveKind
from lumos_core.whatif.config import JobConfig

COMPUTE_BOUND = (Family.GEMM, Family.ATTENTION)
MEMORY_BOUND = (Family.ELEMENTWISE, Family.REDUCTION, Family.KERNEL_OTHER, Family.MEMCPY, Family.MEMSET)


def gemm_ratio(
    shape: tuple[int, int, int],
    sizes: dict[int, int],
    token_ratio: float,
    gpu_old: GpuProfile,
    gpu_new: GpuProfile,
    dtype_bytes: int = 2,
    curve: KernelCurve | None = None,
) -> float:
    """New/old time of a GEMM whose dims change: widths in ``sizes`` (old -> new), rows x token_ratio;
    compute time on the saturating GEMM curve (``curve``: fitted to the trace, else the profile's),
    so small GEMMs grow less than their FLOPs."""
    m, k, n = shape
    m2 = max(1, round(m * token_ratio))
    k2, n2 = sizes.get(k, k), sizes.get(n, n)
    # Backward GEMMs have tokens as their contraction dim (weight gradient: [k, tokens] x [tokens, n]).
    if sizes.get(m) is not None and k not in sizes:
        m2, k2 = sizes[m], max(1, round(k * token_ratio))
    old = costs.gemm_time(m, n, k, gpu_old, dtype_bytes=dtype_bytes, curve=curve)
    new = costs.gemm_time(m2, n2, k2, gpu_new, dtype_bytes=dtype_bytes, curve=curve)
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
        q, q2 = qkv_width(base), qkv_width(new)
        pairs += [(h, h2), (q, q2)]
        if tp > 1 or tp2 > 1:
            pairs += [(h // tp, h2 // tp2), (q // tp, q2 // tp2)]
    if f and f2:
        pairs.append((f, f2))
        if tp > 1 or tp2 > 1:
            pairs.append((f // tp, f2 // tp2))
        if base.mlp == new.mlp == "swiglu":  # the fused gate+up GEMM is 2 x FFN wide
            pairs.append((2 * f, 2 * f2))
            if tp > 1 or tp2 > 1:
                pairs.append((2 * f // tp, 2 * f2 // tp2))
    out: dict[int, int] = {}
    bad: set[int] = set()
    for a, b in pairs:
        if a in out and out[a] != b:
            bad.add(a)
        out[a] = b
    return {k: v for k, v in out.items() if k not in bad and k != v}


def qkv_width(cfg: JobConfig) -> int:
    """Output width of the fused QKV GEMM: 3 x hidden, or with grouped-query attention (fewer KV
    heads than heads) (heads + 2 KV heads) x head dim."""
    h, a, kv = int(cfg.hidden or 0), cfg.heads, cfg.kv_heads
    if not (a and kv) or kv == a:
        return 3 * h
    return (a + 2 * kv) * (h // a)


def layer_gemm_flops(hidden: int, ffn: int) -> float:
    """GEMM FLOPs per token of one transformer layer (QKV, projection, two MLP matmuls) / 2."""
    return 4 * hidden * hidden + 2 * hidden * ffn


def collective_ratio(
    kind: int,
    size_bytes: float,
    shape_old: GroupShape,
    shape_new: GroupShape,
    size_ratio: float,
    model_old: NcclModel,
    model_new: NcclModel,
) -> tuple[float, Prediction | None]:
    """New/old time of a collective: its message scaled by size_ratio, its group reshaped (ranks and
    nodes), maybe on another system; and the new prediction (algorithm, protocol)."""
    if shape_new.ranks <= 1:
        return 0.0, None  # a group of one moves no data
    kind_e = CollectiveKind(int(kind))
    size = max(float(size_bytes), 1.0) if size_bytes > 0 else 1 << 20
    old = model_old.predict(kind_e, size, shape_old if shape_old.ranks > 1 else GroupShape.single_node(2))
    new = model_new.predict(kind_e, size * size_ratio, shape_new)
    return (new.seconds / old.seconds if old.seconds > 0 else 1.0), new


def hardware_ratio(family: np.ndarray, gpu_old: GpuProfile, gpu_new: GpuProfile) -> np.ndarray:
    """Per-family time ratio when moving compute from one GPU to another."""
    out = np.ones(len(family))
    flops = costs.peak_flops(gpu_old) / costs.peak_flops(gpu_new)
    mem = gpu_old.hbm_bandwidth / gpu_new.hbm_bandwidth
    out[np.isin(family, COMPUTE_BOUND)] = flops
    out[np.isin(family, MEMORY_BOUND)] = mem
    return out


def safe_ratio(a: float | None, b: float | None) -> float:
    if not a or not b:
        return 1.0
    r = a / b
    return r if math.isfinite(r) and r > 0 else 1.0
