"""A hardware profile fitted on a cluster's own runs (``lumos calibrate``) and used by ``lumos
estimate|sweep|validate --profile``.

What the runs say about the machine, as achieved rates rather than peaks times efficiencies, so it
works for any device (a CPU has no datasheet tensor peak):

* GEMM throughput (FLOP/s) per *shape class*: GEMMs grouped by their FLOPs in factors of 4. Small
  GEMMs reach a lower rate than large ones; a what-if that changes shapes moves GEMMs between
  classes, and ``gemm_time_ratio`` says how their time changes (FLOPs / rate of the class,
  interpolated between fitted classes on a log scale, flat beyond the fitted range).
* attention throughput (FLOP/s, 4·b·h·s²·d per forward call) and elementwise throughput
  (elements read per second), one rate each.
* collectives: the NCCL model's parameters (:class:`~lumos_core.perf.nccl.params.CommParams`)
  calibrated on the runs' collectives (latency and bandwidth scales per link class), and a plain
  alpha-beta line per link class and collective kind for the report.
* launch and point-to-point overheads (µs): medians of kernel launch calls and of small send/recv.

A field the runs did not constrain is None and the estimator keeps its default model for it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from lumos_core.errors import ConfigError
from lumos_core.perf.nccl.params import CommParams

__all__ = ["PROFILE_VERSION", "AlphaBeta", "GemmClass", "HardwareProfile", "gemm_class"]

PROFILE_VERSION = 1


def _plain(o: Any) -> Any:
    """numpy scalars (fits return them) as plain numbers."""
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def gemm_class(flops: float) -> int:
    """Shape class of a GEMM: FLOPs in factors of 4 (class k holds [4^k, 4^(k+1)) FLOPs)."""
    return int(math.floor(math.log(max(flops, 1.0), 4)))


@dataclass(frozen=True)
class GemmClass:
    cls: int  # gemm_class()
    flops_per_s: float
    samples: int
    residual_pct: float  # median |measured / class-rate time - 1| of its samples, %

    @property
    def flops_range(self) -> tuple[float, float]:
        return 4.0**self.cls, 4.0 ** (self.cls + 1)


@dataclass(frozen=True)
class AlphaBeta:
    """time = alpha + size x bus factor / beta, for one link class and collective kind."""

    scope: str  # "intra" (NVLink) or "inter" (network)
    kind: str
    alpha_us: float
    beta_gbps: float
    samples: int
    residual_pct: float


@dataclass(frozen=True)
class HardwareProfile:
    device: str
    runs: tuple[str, ...] = ()
    gemm: tuple[GemmClass, ...] = ()
    attention_flops_per_s: float | None = None
    elementwise_elems_per_s: float | None = None
    comm: CommParams | None = None
    alpha_beta: tuple[AlphaBeta, ...] = ()
    launch_overhead_us: float | None = None
    p2p_overhead_us: float | None = None
    unconstrained: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ------------------------------------------------------------------ use

    def gemm_rate(self, flops: float) -> float | None:
        """Achieved FLOP/s of a GEMM of ``flops`` (None without fitted classes)."""
        if not self.gemm:
            return None
        pts = sorted((c.cls + 0.5, math.log(c.flops_per_s)) for c in self.gemm)
        x = math.log(max(flops, 1.0), 4)
        if x <= pts[0][0]:
            return math.exp(pts[0][1])
        if x >= pts[-1][0]:
            return math.exp(pts[-1][1])
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if x0 <= x <= x1:
                return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
        return math.exp(pts[-1][1])

    def gemm_time_ratio(self, flops_old: float, flops_new: float) -> float | None:
        """New/old time of a GEMM whose FLOPs change (None without fitted classes)."""
        a, b = self.gemm_rate(flops_old), self.gemm_rate(flops_new)
        if not a or not b or flops_old <= 0:
            return None
        return (flops_new / b) / (flops_old / a)

    # ------------------------------------------------------------------ files

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["version"] = PROFILE_VERSION
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(
            orjson.dumps(self.as_dict(), option=orjson.OPT_INDENT_2, default=_plain) + b"\n"
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareProfile:
        if d.get("version") != PROFILE_VERSION:
            raise ConfigError(f"hardware profile version {d.get('version')!r} is not {PROFILE_VERSION}")
        comm = d.get("comm")
        return cls(
            device=str(d["device"]),
            runs=tuple(d.get("runs") or ()),
            gemm=tuple(GemmClass(**g) for g in d.get("gemm") or ()),
            attention_flops_per_s=d.get("attention_flops_per_s"),
            elementwise_elems_per_s=d.get("elementwise_elems_per_s"),
            comm=CommParams(**comm) if isinstance(comm, dict) else None,
            alpha_beta=tuple(AlphaBeta(**a) for a in d.get("alpha_beta") or ()),
            launch_overhead_us=d.get("launch_overhead_us"),
            p2p_overhead_us=d.get("p2p_overhead_us"),
            unconstrained=tuple(d.get("unconstrained") or ()),
            notes=tuple(d.get("notes") or ()),
        )

    @classmethod
    def load(cls, path: str | Path) -> HardwareProfile:
        try:
            d = orjson.loads(Path(path).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the hardware profile ({exc})") from None
        if not isinstance(d, dict) or "device" not in d:
            raise ConfigError(f"{path}: not a Lumos hardware profile (lumos calibrate writes them)")
        try:
            return cls.from_dict(d)
        except (TypeError, KeyError, ValueError) as exc:
            raise ConfigError(f"{path}: malformed hardware profile ({exc})") from None
