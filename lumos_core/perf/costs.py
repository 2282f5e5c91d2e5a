"""Analytical kernel and collective cost models (seconds), shared by the estimator and ``lumos synth``.

Kernels follow a roofline: a kernel takes the longer of its compute time (FLOPs at an efficiency
fraction of the peak) and its memory time (bytes at a fraction of HBM bandwidth), and never less
than the GPU's ``kernel_floor``.

Collectives are costed by the NCCL model of :mod:`lumos_core.perf.nccl` (algorithms, protocols
and the group's node layout; calibrated there on a trace's own collectives). This module keeps the
NCCL-tests conventions they share: the message size ``S`` (the full buffer: all-reduce input,
all-gather *output*, reduce-scatter *input*) and the bus factor (all-reduce 2(n-1)/n; all-gather,
reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1), see
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md. Everything here is pure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from lumos_core.perf.collective_kinds import as_collective_kind, bus_factor
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.perf.kernel_curves import KernelCurve, profile_curves
from lumos_core.perf.nccl.model import NcclModel
from lumos_core.trace.model import CollectiveKind

__all__ = [
    "LinkParams",
    "as_collective_kind",
    "attention_flops",
    "attention_time",
    "bus_factor",
    "collective_time",
    "elementwise_time",
    "gemm_flops",
    "gemm_time",
    "link_params",
    "memory_time",
    "peak_flops",
    "spans_nodes",
    "wave_factor",
]

# ---------------------------------------------------------------------------------------------
# Kernels (roofline)
# ---------------------------------------------------------------------------------------------


def gemm_flops(m: int, n: int, k: int) -> float:
    """FLOPs of an (m x k) @ (k x n) matrix product: one multiply and one add per MAC."""
    return 2.0 * m * n * k


def peak_flops(gpu: GpuProfile, dtype_bytes: int = 2) -> float:
    """Peak FLOP/s for an element size: half-precision types run on tensor cores, FP32 GEMMs (no
    TF32) on the CUDA cores."""
    return gpu.peak_bf16_flops if dtype_bytes <= 2 else gpu.peak_fp32_flops


# Output tiles a GEMM library picks from on tensor cores (rows, columns, throughput relative to the
# largest): smaller tiles fill more SMs but reuse each operand less (CUTLASS's A100/H100 tile
# family; cuBLAS heuristics choose among the same kind). Modelling defaults, not fitted.
_TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.9), (128, 64, 0.8), (64, 128, 0.8), (64, 64, 0.6))
_SPLIT_K = (1, 2, 4)  # split-K factors a library uses when there are too few tiles to fill the SMs
_MIN_SPLIT_DEPTH = 256  # ... keeping each slice of K this deep at least
# A tile's fixed work beside its main loop over K (filling the software pipeline, the epilogue that
# writes the output tile), in units of K: a tile costs as if K were this much deeper, so shallow
# GEMMs (K = a narrow tensor-parallel shard) stay far from peak. A modelling default (~3 pipeline
# stages of 32 plus the epilogue), not fitted.
_TILE_K_OVERHEAD = 128


def wave_factor(m: int, n: int, k: int, sms: int, batch: int = 1) -> float:
    """How much longer than its FLOPs alone a GEMM takes on ``sms`` SMs (>= 1): the output is cut
    into tiles, one thread block per tile, run in waves of ``sms`` blocks, so partial tiles (padding)
    and an underfilled last wave cost as if full. Small problems (few tiles: narrow tensor-parallel
    shards, one micro-batch) leave SMs idle; a library answers with smaller tiles (less operand reuse)
    or split-K (slices of K on more blocks). Each tile also pays a fixed pipeline fill and epilogue
    (``_TILE_K_OVERHEAD``), which shallow GEMMs do not amortise. The best of those choices, as a
    heuristic would pick."""
    best = math.inf
    for tm, tn, rel in _TILES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        for s in _SPLIT_K:
            if s > 1 and k // s < _MIN_SPLIT_DEPTH:
                break
            waves = math.ceil(tiles * s / sms)
            # MACs the SMs are busy for, idle ones and each tile's fill and epilogue included
            padded = waves * sms * tm * tn * (k / s + _TILE_K_OVERHEAD)
            best = min(best, padded / (batch * m * n * k) / rel)
    return max(best, 1.0)


def gemm_time(
    m: int,
    n: int,
    k: int,
    gpu: GpuProfile,
    *,
    dtype_bytes: int = 2,
    efficiency: float | None = None,
    curve: KernelCurve | None = None,
    batch: int = 1,
) -> float:
    """Time of a GEMM (``batch`` independent m x k by k x n products in one kernel): the longer of its
    compute time and its memory time (bytes of A, B, C at HBM bandwidth), never less than the
    kernel floor. Compute time follows the saturating GEMM curve of
    :mod:`lumos_core.perf.kernel_curves` (``curve``, e.g. fitted to a trace, else the profile's), or
    a flat ``efficiency`` when one is given, applied to the FLOPs the SMs are busy for: the tile and
    wave quantisation of :func:`wave_factor` (what makes small and narrow GEMMs far from peak)."""
    flops = batch * gemm_flops(m, n, k) * wave_factor(m, n, k, gpu.sm_count, batch)
    if efficiency is not None:
        compute = flops / (peak_flops(gpu, dtype_bytes) * efficiency)
    else:
        compute = (curve or profile_curves(gpu, dtype_bytes)["gemm"]).time(flops)
    memory = batch * dtype_bytes * (m * k + k * n + m * n) / (gpu.hbm_bandwidth * gpu.memory_efficiency)
    return max(compute, memory, gpu.kernel_floor)


def attention_flops(
    batch: int,
    heads: int,
    seq_q: int,
    head_dim: int,
    *,
    seq_k: int | None = None,
    causal: bool = True,
    backward: bool = False,
) -> float:
    """FLOPs of scaled-dot-product attention (the two matmuls QK^T and PV; softmax ignored).

    Forward is 4·b·h·s_q·s_k·d; a causal mask halves it (FlashAttention skips masked blocks); the
    backward pass does 5 matmuls instead of 2, i.e. 2.5x the forward.
    """
    sk = seq_q if seq_k is None else seq_k
    flops = 4.0 * batch * heads * seq_q * sk * head_dim
    if causal:
        flops /= 2.0
    if backward:
        flops *= 2.5
    return flops


def attention_time(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    gpu: GpuProfile,
    *,
    causal: bool = True,
    backward: bool = False,
    dtype_bytes: int = 2,
    efficiency: float | None = None,
) -> float:
    """Roofline time of a fused (Flash) attention kernel."""
    eff = gpu.attention_efficiency if efficiency is None else efficiency
    compute = attention_flops(batch, heads, seq, head_dim, causal=causal, backward=backward) / (
        peak_flops(gpu, dtype_bytes) * eff
    )
    # Forward reads Q, K, V and writes O; backward also reads O, dO and writes dQ, dK, dV.
    tensors = 8 if backward else 4
    nbytes = tensors * batch * heads * seq * head_dim * dtype_bytes
    memory = nbytes / (gpu.hbm_bandwidth * gpu.memory_efficiency)
    return max(compute, memory, gpu.kernel_floor)


def memory_time(nbytes: float, gpu: GpuProfile, *, efficiency: float | None = None) -> float:
    """Time of a memory-bound kernel that moves ``nbytes`` through HBM (reads plus writes)."""
    eff = gpu.memory_efficiency if efficiency is None else efficiency
    return max(nbytes / (gpu.hbm_bandwidth * eff), gpu.kernel_floor)


def elementwise_time(
    n_elements: int, gpu: GpuProfile, *, reads: int = 1, writes: int = 1, dtype_bytes: int = 2
) -> float:
    """An elementwise kernel reading ``reads`` and writing ``writes`` tensors of ``n_elements``."""
    return memory_time(float(n_elements) * dtype_bytes * (reads + writes), gpu)


# ---------------------------------------------------------------------------------------------
# Collectives (NCCL-tests conventions; times from perf.nccl)
# ---------------------------------------------------------------------------------------------


def spans_nodes(ranks: Iterable[int], gpus_per_node: int) -> bool:
    """Whether a group of global ranks (node = rank // gpus_per_node) spans more than one node."""
    nodes = {r // gpus_per_node for r in ranks}
    return len(nodes) > 1


@dataclass(frozen=True, slots=True)
class LinkParams:
    """Achievable bus bandwidth (B/s) and per-step latency (s) of the links a group uses."""

    bandwidth: float
    latency: float


def link_params(gpu: GpuProfile, inter_node: bool) -> LinkParams:
    """NVLink inside a node; a group spanning nodes is limited by the network."""
    if inter_node:
        return LinkParams(gpu.network_bandwidth * gpu.network_efficiency, gpu.network_latency)
    return LinkParams(gpu.nvlink_bandwidth * gpu.nvlink_efficiency, gpu.nvlink_latency)


@functools.lru_cache(maxsize=64)
def _nccl_model(gpu: GpuProfile, algorithm: str) -> NcclModel:
    model = NcclModel.for_gpu(gpu)
    if algorithm != "auto":
        model = NcclModel(model.params, model.kernel_floor, algorithms=(algorithm,))
    return model


def collective_time(
    kind: CollectiveKind | str,
    size_bytes: float,
    group_size: int,
    gpu: GpuProfile | str | None = None,
    *,
    inter_node: bool = False,
    nodes: int | None = None,
    algorithm: str = "auto",
) -> float:
    """Seconds of one collective of ``size_bytes`` (NCCL-tests size) over ``group_size`` GPUs, by
    the NCCL model of :mod:`lumos_core.perf.nccl` on ``gpu``'s system (uncalibrated).

    The group is packed onto nodes of the GPU's size, on at least two if ``inter_node``, or on
    ``nodes`` nodes. ``algorithm`` restricts NCCL's choice ("ring", "tree", "nvls", ...); "auto"
    picks the fastest, as NCCL's tuner does. A single-GPU group costs only the kernel floor.
    """
    if algorithm not in ("auto", "ring", "tree", "nvls", "nvls_tree", "pat", "p2p"):
        raise ValueError(f"unknown collective algorithm {algorithm!r}")
    return _nccl_model(get_gpu(gpu), algorithm).time(kind, size_bytes, group_size, inter_node, nodes=nodes)
