"""Collective times the way NCCL's tuner sees them: every algorithm and protocol is costed and the
fastest is picked (``predict``), and the model can be calibrated on measured collectives.

Calibration (``calibrate``) keeps the structure and fits, per scope (inside one node, across
nodes), two corrections by least squares: a latency scale and a bandwidth scale, so that
``measured = a * latency + b * transfer`` of the algorithm the model picks. A scope without
samples keeps the profile's numbers and says so; a scope with one sample size gets one scale.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from lumos_core.perf.collective_kinds import as_collective_kind, bus_factor
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.perf.nccl.algorithms import Candidate, candidates
from lumos_core.perf.nccl.params import CommParams, params_for_gpu
from lumos_core.perf.nccl.topology import GroupShape
from lumos_core.trace.model import CollectiveKind

__all__ = ["CollectiveSample", "NcclModel", "Prediction"]

# Never let a calibration push a scale outside this range: beyond it the samples are not NCCL
# kernels on this hardware (a CPU trace's gloo, a kernel waiting for a straggler) and the fit
# would be extrapolating from noise.
_SCALE_RANGE = (1e-3, 1e4)


@dataclass(frozen=True, slots=True)
class Prediction:
    """One collective: seconds, the algorithm and protocol chosen, and its bandwidths (B/s)."""

    kind: CollectiveKind
    size_bytes: float
    shape: GroupShape
    seconds: float
    algorithm: str
    protocol: str
    latency: float
    transfer: float

    @property
    def algbw(self) -> float:
        return self.size_bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.kind, self.shape.ranks)

    def as_dict(self) -> dict[str, object]:
        return {
            "time_us": self.seconds * 1e6,
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "algbw_gbps": self.algbw / 1e9,
            "busbw_gbps": self.busbw / 1e9,
        }


@dataclass(frozen=True, slots=True)
class CollectiveSample:
    """A measured collective (for traces: the shortest kernel of an instance across its ranks, the
    last rank to arrive, since earlier ranks' kernels include waiting for it)."""

    kind: CollectiveKind
    size_bytes: float
    shape: GroupShape
    seconds: float


@dataclass(frozen=True)
class NcclModel:
    """Predicted collective times for one system (:class:`CommParams`)."""

    params: CommParams
    kernel_floor: float = 2.0e-6
    algorithms: tuple[str, ...] | None = None  # restrict the choice (NCCL_ALGO), None: all
    protocols: tuple[str, ...] | None = None  # restrict the choice (NCCL_PROTO), None: all

    @classmethod
    def for_gpu(
        cls,
        gpu: GpuProfile | str | None = None,
        *,
        gpus_per_node: int | None = None,
        nvlink_gbps: float | None = None,
        network_gbps: float | None = None,
    ) -> NcclModel:
        g = get_gpu(gpu)
        params = params_for_gpu(g).with_links(
            gpus_per_node=gpus_per_node, nvlink_gbps=nvlink_gbps, network_gbps=network_gbps
        )
        return cls(params, g.kernel_floor)

    # -------------------------------------------------------------------------- prediction

    def shape(self, ranks: int, *, nodes: int | None = None, inter_node: bool | None = None) -> GroupShape:
        """A group of ``ranks``: on ``nodes`` nodes if given, else packed onto as few as the node
        size allows (at least two if ``inter_node``)."""
        ranks = max(int(ranks), 1)
        if nodes is None:
            s = GroupShape.spread(ranks, self.params.gpus_per_node)
            if inter_node and s.nodes == 1 and ranks > 1:
                nodes = 2
            else:
                return s
        nodes = max(1, min(int(nodes), ranks))
        return GroupShape(ranks, nodes, math.ceil(ranks / nodes))

    def candidates(self, kind: CollectiveKind | str, size_bytes: float, shape: GroupShape) -> list[Candidate]:
        k = as_collective_kind(kind)
        out = candidates(k, max(float(size_bytes), 1.0), shape, self.params)
        if self.algorithms:
            out = [c for c in out if c.algorithm in self.algorithms] or out
        if self.protocols:
            out = [c for c in out if c.protocol in self.protocols] or out
        return out

    def predict(
        self,
        kind: CollectiveKind | str,
        size_bytes: float,
        ranks: int | GroupShape,
        *,
        nodes: int | None = None,
        inter_node: bool | None = None,
    ) -> Prediction:
        """The fastest (algorithm, protocol) for this collective, as NCCL's tuner picks it."""
        k = as_collective_kind(kind)
        shape = (
            ranks if isinstance(ranks, GroupShape) else self.shape(ranks, nodes=nodes, inter_node=inter_node)
        )
        if shape.ranks <= 1 or (bus_factor(k, shape.ranks) == 0.0 and k != CollectiveKind.BARRIER):
            return Prediction(
                k, float(size_bytes), shape, self.kernel_floor, "none", "none", self.kernel_floor, 0.0
            )
        size = 1.0 if k == CollectiveKind.BARRIER else float(size_bytes)
        best = min(self.candidates(k, size, shape), key=lambda c: c.time)
        seconds = max(best.time, self.kernel_floor)
        return Prediction(
            k, float(size_bytes), shape, seconds, best.algorithm, best.protocol, best.latency, best.transfer
        )

    def time(
        self,
        kind: CollectiveKind | str,
        size_bytes: float,
        group_size: int,
        inter_node: bool = False,
        *,
        nodes: int | None = None,
    ) -> float:
        """Seconds of one collective (the interface the re-timing rules use)."""
        return self.predict(kind, size_bytes, group_size, nodes=nodes, inter_node=inter_node).seconds

    def size_for_time(self, kind: CollectiveKind | str, seconds: float, shape: GroupShape) -> float:
        """The message size (bytes) this model would move in ``seconds``: for collectives whose
        size the trace does not record, inferred from their measured transfer time."""
        lo, hi = 1.0, 1e13
        if self.predict(kind, lo, shape).seconds >= seconds:
            return lo
        for _ in range(60):  # bisection on a log scale: time grows monotonically with size
            mid = math.sqrt(lo * hi)
            if self.predict(kind, mid, shape).seconds < seconds:
                lo = mid
            else:
                hi = mid
            if hi / lo < 1.01:
                break
        return math.sqrt(lo * hi)

    # -------------------------------------------------------------------------- calibration

    def calibrate(self, samples: Iterable[CollectiveSample], min_samples: int = 1) -> NcclModel:
        """A model whose latency and bandwidth scales, per scope, fit ``samples``."""
        by_scope: dict[bool, list[CollectiveSample]] = {False: [], True: []}
        for s in samples:
            if s.seconds > 0 and s.size_bytes > 0 and s.shape.ranks > 1:
                by_scope[s.shape.inter_node].append(s)
        params = self.params
        for inter, pts in by_scope.items():
            if len(pts) < min_samples:
                continue
            a, b = 1.0, 1.0
            # Two rounds: the first fit can change which algorithm the model picks.
            for _ in range(2):
                model = replace(self, params=params)
                lat, xfer, meas = [], [], []
                for s in pts:
                    pr = model.predict(s.kind, s.size_bytes, s.shape)
                    lat.append(pr.latency)
                    xfer.append(pr.transfer)
                    meas.append(s.seconds)
                da, db = _fit_two_scales(lat, xfer, meas)
                a, b = a * da, b * db
                params = _scaled(params, inter, da, db)
            sizes = len({s.size_bytes for s in pts})
            note = f"fitted on {len(pts)} samples ({sizes} sizes): latency x{a:.3g}, bandwidth x{1 / b:.3g}"
            params = replace(params, **{("source_inter" if inter else "source_intra"): note})
        return replace(self, params=params)

    def source(self, kind: CollectiveKind | str | None = None, inter_node: bool = False) -> str:
        """Where a scope's numbers come from ("profile" or "fitted on ...")."""
        return self.params.source_inter if inter_node else self.params.source_intra

    def describe(self) -> list[str]:
        p = self.params
        return [
            f"collectives on {p.gpu} x{p.gpus_per_node}/node: NVLink {p.nvlink_gbps:.0f} GB/s "
            f"(ring {p.nvlink_gbps * p.ring_efficiency * p.bandwidth_scale_intra:.0f} GB/s bus"
            + (
                f", NVLS {p.nvlink_gbps * p.nvls_efficiency * p.bandwidth_scale_intra:.0f} GB/s"
                if p.nvls
                else ""
            )
            + f"), {p.nics_per_node} NICs x {p.network_gbps:.1f} GB/s "
            f"({p.network_gbps * p.network_efficiency * p.bandwidth_scale_inter:.1f} achievable)",
            f"intra-node: {p.source_intra}",
            f"inter-node: {p.source_inter}",
        ]


def _fit_two_scales(lat: list[float], xfer: list[float], meas: list[float]) -> tuple[float, float]:
    """Non-negative least squares of ``meas = a*lat + b*xfer`` in relative terms (each sample
    weighted by 1/meas, so small and large collectives count alike; the target is then 1). One common scale when the
    two columns cannot be told apart."""
    w = [1.0 / m for m in meas]
    x1 = [li * wi for li, wi in zip(lat, w, strict=True)]
    x2 = [xi * wi for xi, wi in zip(xfer, w, strict=True)]
    s11 = sum(v * v for v in x1)
    s22 = sum(v * v for v in x2)
    s12 = sum(u * v for u, v in zip(x1, x2, strict=True))
    y1 = sum(x1)
    y2 = sum(x2)
    det = s11 * s22 - s12 * s12
    if len(meas) >= 2 and det > 1e-12 * max(s11 * s22, 1e-300):
        a = (y1 * s22 - y2 * s12) / det
        b = (y2 * s11 - y1 * s12) / det
        if a > 0 and b > 0:
            return _clamp(a), _clamp(b)
        # One column is not supported by the data: fit the other alone, keep the first as is.
        if a <= 0 and s22 > 0:
            return 1.0, _clamp((y2 - s12) / s22)
        if s11 > 0:
            return _clamp((y1 - s12) / s11), 1.0
    tot = [u + v for u, v in zip(x1, x2, strict=True)]
    stt = sum(v * v for v in tot)
    c = sum(tot) / stt if stt > 0 else 1.0
    return _clamp(c), _clamp(c)


def _clamp(x: float) -> float:
    lo, hi = _SCALE_RANGE
    return min(max(x, lo), hi)


def _scaled(p: CommParams, inter: bool, lat: float, xfer: float) -> CommParams:
    if inter:
        return replace(
            p,
            latency_scale_inter=p.latency_scale_inter * lat,
            bandwidth_scale_inter=p.bandwidth_scale_inter / xfer,
        )
    return replace(
        p,
        latency_scale_intra=p.latency_scale_intra * lat,
        bandwidth_scale_intra=p.bandwidth_scale_intra / xfer,
    )
