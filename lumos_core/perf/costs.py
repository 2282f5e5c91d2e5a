"""Analytical kernel and collective cost models (seconds), shared by the estimator and ``lumos synth``.

Kernels follow a roofline: a kernel takes the longer of its compute time (FLOPs at an efficiency
fraction of the peak) and its memory time (bytes at a fraction of HBM bandwidth), and never less
than the GPU's ``kernel_floor``.

Collectives follow the alpha-beta model with NCCL-tests' bus-bandwidth convention
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md)::

    t = steps * alpha + S * f(kind, n) / B_bus

where ``S`` is the message size as NCCL-tests counts it (the full buffer: all-reduce input,
all-gather *output*, reduce-scatter *input*), ``f`` the bus factor (all-reduce 2(n-1)/n;
all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1), ``B_bus`` the
achievable bus bandwidth of the slowest link the group uses (a group spanning nodes is limited by
the network) and ``steps`` the number of latency-bound hops of the algorithm (ring or tree).

:class:`CommModel` wraps this model and can be *calibrated* from measured collectives: it fits an
effective latency ``a`` and bus bandwidth ``B`` per (collective kind, intra/inter-node) by least
squares on ``t = a + S * f / B``, and falls back to pooled fits or the profile where data is
missing, reporting what it used. Everything here is pure and picklable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.trace.model import CollectiveKind

__all__ = [
    "CommFit",
    "CommModel",
    "CommSample",
    "LinkParams",
    "as_collective_kind",
    "attention_flops",
    "attention_time",
    "bus_factor",
    "collective_time",
    "elementwise_time",
    "gemm_flops",
    "gemm_time",
    "latency_steps",
    "link_params",
    "memory_time",
    "peak_flops",
    "spans_nodes",
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


def gemm_time(
    m: int, n: int, k: int, gpu: GpuProfile, *, dtype_bytes: int = 2, efficiency: float | None = None
) -> float:
    """Roofline time of a GEMM: max(2mnk / (peak * eff), bytes(A, B, C) / (HBM * mem_eff), floor)."""
    eff = gpu.gemm_efficiency if efficiency is None else efficiency
    compute = gemm_flops(m, n, k) / (peak_flops(gpu, dtype_bytes) * eff)
    memory = dtype_bytes * (m * k + k * n + m * n) / (gpu.hbm_bandwidth * gpu.memory_efficiency)
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
# Collectives (alpha-beta)
# ---------------------------------------------------------------------------------------------

_KIND_NAMES = {
    "allreduce": CollectiveKind.ALL_REDUCE,
    "all_reduce": CollectiveKind.ALL_REDUCE,
    "allgather": CollectiveKind.ALL_GATHER,
    "all_gather": CollectiveKind.ALL_GATHER,
    "_allgather_base": CollectiveKind.ALL_GATHER,
    "all_gather_into_tensor": CollectiveKind.ALL_GATHER,
    "reducescatter": CollectiveKind.REDUCE_SCATTER,
    "reduce_scatter": CollectiveKind.REDUCE_SCATTER,
    "_reduce_scatter_base": CollectiveKind.REDUCE_SCATTER,
    "reduce_scatter_tensor": CollectiveKind.REDUCE_SCATTER,
    "broadcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
    "alltoall": CollectiveKind.ALL_TO_ALL,
    "all_to_all": CollectiveKind.ALL_TO_ALL,
    "all_to_allv": CollectiveKind.ALL_TO_ALL,
    "alltoall_base": CollectiveKind.ALL_TO_ALL,
    "send": CollectiveKind.SEND,
    "recv": CollectiveKind.RECV,
    "sendrecv": CollectiveKind.SEND_RECV,
    "send_recv": CollectiveKind.SEND_RECV,
    "barrier": CollectiveKind.BARRIER,
}


def as_collective_kind(kind: CollectiveKind | str | int) -> CollectiveKind:
    """Accept a :class:`CollectiveKind`, its value, or a PyTorch/NCCL-style name ("allreduce")."""
    if isinstance(kind, CollectiveKind):
        return kind
    if isinstance(kind, int):
        return CollectiveKind(kind)
    key = kind.strip().lower().replace("-", "_").replace(" ", "_")
    if key in _KIND_NAMES:
        return _KIND_NAMES[key]
    if key.upper() in CollectiveKind.__members__:
        return CollectiveKind[key.upper()]
    return CollectiveKind.UNKNOWN


def bus_factor(kind: CollectiveKind | str, n: int) -> float:
    """NCCL-tests bus-bandwidth factor: bytes each GPU's link carries per byte of message."""
    k = as_collective_kind(kind)
    if k in (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV):
        return 1.0
    if n <= 1:
        return 0.0
    if k in (CollectiveKind.ALL_REDUCE, CollectiveKind.UNKNOWN):
        return 2.0 * (n - 1) / n
    if k in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
        return (n - 1) / n
    if k == CollectiveKind.BARRIER:
        return 0.0
    return 1.0  # broadcast, reduce


def latency_steps(kind: CollectiveKind | str, n: int, algorithm: str = "ring") -> int:
    """Latency-bound hops of one collective: a ring all-reduce does 2(n-1), a tree 2·ceil(log2 n)."""
    k = as_collective_kind(kind)
    if k in (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV):
        return 1
    if n <= 1:
        return 0
    log_n = math.ceil(math.log2(n))
    if k in (CollectiveKind.ALL_REDUCE, CollectiveKind.UNKNOWN, CollectiveKind.BARRIER):
        return 2 * log_n if algorithm == "tree" else 2 * (n - 1)
    if k in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        return log_n if algorithm == "tree" else n - 1
    return n - 1  # all-gather, reduce-scatter, all-to-all: ring only


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


# Tree all-reduce moves each byte up and down the tree: ~2 S per GPU link, against 2(n-1)/n S for
# the ring, so the ring wins on bandwidth and the tree on latency (large n, small messages).
_TREE_ALLREDUCE_FACTOR = 2.0


def collective_time(
    kind: CollectiveKind | str,
    size_bytes: float,
    group_size: int,
    gpu: GpuProfile | str | None = None,
    *,
    inter_node: bool = False,
    algorithm: str = "auto",
) -> float:
    """Alpha-beta time of one collective of ``size_bytes`` (NCCL-tests size) over ``group_size`` GPUs.

    ``algorithm`` is "ring", "tree" (all-reduce, broadcast and reduce only) or "auto" (the faster
    of the two, as NCCL's tuner picks). A single-GPU group costs only the kernel floor.
    """
    g = get_gpu(gpu)
    k = as_collective_kind(kind)
    link = link_params(g, inter_node)
    f = bus_factor(k, group_size)
    ring = latency_steps(k, group_size, "ring") * link.latency + size_bytes * f / link.bandwidth
    t = ring
    if (
        algorithm in ("tree", "auto")
        and k in (CollectiveKind.ALL_REDUCE, CollectiveKind.UNKNOWN)
        and group_size > 1
    ):
        tree = (
            latency_steps(k, group_size, "tree") * link.latency
            + size_bytes * _TREE_ALLREDUCE_FACTOR / link.bandwidth
        )
        t = tree if algorithm == "tree" else min(ring, tree)
    elif (
        algorithm in ("tree", "auto")
        and k in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
        and group_size > 1
    ):
        tree = latency_steps(k, group_size, "tree") * link.latency + size_bytes * f / link.bandwidth
        t = tree if algorithm == "tree" else min(ring, tree)
    elif algorithm not in ("ring", "tree", "auto"):
        raise ValueError(f"unknown collective algorithm {algorithm!r}")
    return max(t, g.kernel_floor)


# ---------------------------------------------------------------------------------------------
# Calibrated communication model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommSample:
    """One measured collective: kind, NCCL-tests message size, group size and seconds.

    For collectives measured in a trace use the *shortest* duration among the participants of an
    instance (the last rank to arrive): earlier ranks' kernels include waiting for it.
    """

    kind: CollectiveKind
    size_bytes: float
    group_size: int
    seconds: float
    inter_node: bool = False


@dataclass(frozen=True, slots=True)
class CommFit:
    """Effective latency ``a`` (s) and bus bandwidth (B/s) of one (kind, scope), and their source."""

    latency: float
    bandwidth: float
    n_samples: int
    source: str  # "fitted", "pooled" (from other kinds of the same scope) or "profile"
    rms_error: float = 0.0  # seconds, of the fit on its samples


def _fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least squares ``y = a + b x`` with ``a >= 0`` and ``b > 0``; None if not determined."""
    n = len(xs)
    if n == 0:
        return None
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n >= 2 and sxx > 0:
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        a = my - b * mx
        if b > 0 and a >= 0:
            return a, b
    # Not enough spread, or an unphysical intercept: fit through the origin (pure bandwidth).
    sx2 = sum(x * x for x in xs)
    if sx2 <= 0:
        return None
    b = sum(x * y for x, y in zip(xs, ys, strict=True)) / sx2
    return (0.0, b) if b > 0 else None


@dataclass(frozen=True)
class CommModel:
    """Collective times from a GPU profile, optionally calibrated from measured samples.

    ``fits`` maps (kind, inter_node) to a :class:`CommFit`; (kind, scope) pairs without a fit use
    the profile's alpha-beta model (:func:`collective_time`). Build with :meth:`from_profile`, then
    :meth:`calibrate` returns a new model; :meth:`describe` says what each kind uses.
    """

    gpu: GpuProfile
    fits: dict[tuple[CollectiveKind, bool], CommFit] = field(default_factory=dict)
    algorithm: str = "auto"

    @classmethod
    def from_profile(cls, gpu: GpuProfile | str | None = None, algorithm: str = "auto") -> CommModel:
        return cls(get_gpu(gpu), {}, algorithm)

    def calibrate(self, samples: Iterable[CommSample], min_samples: int = 2) -> CommModel:
        """A model fitted to ``samples``: per (kind, scope) if it has ``min_samples`` points with
        distinct sizes, else pooled over the kinds of the same scope, else the profile."""
        by_key: dict[tuple[CollectiveKind, bool], list[tuple[float, float]]] = {}
        for s in samples:
            kind = as_collective_kind(s.kind)
            x = s.size_bytes * bus_factor(kind, s.group_size)
            if x <= 0 or s.seconds <= 0:
                continue  # a no-op collective says nothing about bandwidth
            by_key.setdefault((kind, bool(s.inter_node)), []).append((x, s.seconds))
        fits: dict[tuple[CollectiveKind, bool], CommFit] = {}
        # Pools share links and an algorithm family: point-to-point apart from collectives, because
        # a send pays one hop of latency where a ring collective pays many.
        pools: dict[tuple[bool, bool], list[tuple[float, float]]] = {}
        for (kind, inter), pts in by_key.items():
            pools.setdefault((inter, kind.is_p2p), []).extend(pts)
            fit = self._fit(pts, "fitted", min_samples)
            if fit is not None:
                fits[(kind, inter)] = fit
        for (inter, p2p), pts in pools.items():
            fit = self._fit(pts, "pooled", min_samples)
            if fit is None:
                continue
            kinds = {k for k, i in by_key if i == inter and k.is_p2p == p2p}
            kinds.update(k for k in _FITTABLE_KINDS if k.is_p2p == p2p)
            for kind in kinds:
                fits.setdefault((kind, inter), fit)
        return replace(self, fits=fits)

    @staticmethod
    def _fit(pts: list[tuple[float, float]], source: str, min_samples: int) -> CommFit | None:
        if len(pts) < min_samples or len({x for x, _ in pts}) < min(2, min_samples):
            return None
        xs = [x for x, _ in pts]
        ys = [y for _, y in pts]
        line = _fit_line(xs, ys)
        if line is None:
            return None
        a, b = line
        rms = math.sqrt(sum((a + b * x - y) ** 2 for x, y in pts) / len(pts))
        return CommFit(latency=a, bandwidth=1.0 / b, n_samples=len(pts), source=source, rms_error=rms)

    def fit_for(self, kind: CollectiveKind | str, inter_node: bool) -> CommFit | None:
        return self.fits.get((as_collective_kind(kind), bool(inter_node)))

    def source(self, kind: CollectiveKind | str, inter_node: bool = False) -> str:
        fit = self.fit_for(kind, inter_node)
        return fit.source if fit else "profile"

    def time(
        self, kind: CollectiveKind | str, size_bytes: float, group_size: int, inter_node: bool = False
    ) -> float:
        """Seconds of one collective: the fit for (kind, scope) if any, else the profile model."""
        k = as_collective_kind(kind)
        fit = self.fit_for(k, inter_node)
        if fit is None:
            return collective_time(
                k, size_bytes, group_size, self.gpu, inter_node=inter_node, algorithm=self.algorithm
            )
        f = bus_factor(k, group_size)
        if f == 0.0:
            return self.gpu.kernel_floor
        return max(fit.latency + size_bytes * f / fit.bandwidth, self.gpu.kernel_floor)

    def describe(self) -> list[str]:
        """One line per fitted (kind, scope), then what everything else uses."""
        lines = []
        for (kind, inter), fit in sorted(self.fits.items(), key=lambda kv: (kv[0][1], int(kv[0][0]))):
            scope = "inter-node" if inter else "intra-node"
            lines.append(
                f"{kind.label} {scope}: {fit.source} from {fit.n_samples} samples: "
                f"latency {fit.latency * 1e6:.1f} µs, bus bandwidth {fit.bandwidth / 1e9:.1f} GB/s"
            )
        intra = link_params(self.gpu, False)
        inter = link_params(self.gpu, True)
        lines.append(
            f"otherwise {self.gpu.name} profile: NVLink {intra.bandwidth / 1e9:.0f} GB/s, "
            f"{intra.latency * 1e6:.1f} µs/step; network {inter.bandwidth / 1e9:.1f} GB/s, "
            f"{inter.latency * 1e6:.1f} µs/step ({self.algorithm})"
        )
        return lines


_FITTABLE_KINDS = (
    CollectiveKind.ALL_REDUCE,
    CollectiveKind.ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER,
    CollectiveKind.ALL_TO_ALL,
    CollectiveKind.BROADCAST,
    CollectiveKind.REDUCE,
    CollectiveKind.SEND,
    CollectiveKind.RECV,
    CollectiveKind.SEND_RECV,
)
