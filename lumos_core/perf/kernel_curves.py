"""Kernel time as a saturating function of the work: ``t = fixed + work / (peak * efficiency)``.

Real kernels do not run at one fraction of the peak: a small GEMM pays a near-constant cost
(launch tail, a partial wave of thread blocks, the epilogue) that a large one amortises, so its
achieved efficiency ``work / (peak * t)`` rises with size and saturates at ``efficiency``. This
affine form is the simplest curve with that shape; it has two parameters per kernel family, and
both can be fitted to the kernels of a trace (:func:`fit_curve`), with the GPU profile's values as
the prior a trace with few samples stays close to.

Families: GEMMs by FLOPs (2MNK) at the dtype's tensor peak; attention by FLOPs at the same peak;
elementwise/memory-bound kernels by bytes moved at the HBM bandwidth. The prior ``fixed`` times are
modelling defaults of the order cuBLAS/FlashAttention show for tiny problems (a few µs), not
measurements. :class:`KernelCurve` is plain frozen data, so a calibration can store and reuse it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lumos_core.perf.hardware import GpuProfile, get_gpu

__all__ = ["KernelCurve", "fit_curve", "profile_curves"]

# Prior fixed time per kernel (s) by family: a small GEMM or attention kernel costs a few µs more
# than its FLOPs at full efficiency; memory-bound kernels a little less.
_FIXED_PRIOR = {"gemm": 4.0e-6, "attention": 6.0e-6, "elementwise": 2.0e-6}
# The prior counts as half a sample for the efficiency (enough to settle a fit with one shape) and
# much less for the fixed time, whose relative uncertainty is large (a few µs either way).
_PRIOR_WEIGHT = 0.5
_PRIOR_WEIGHT_FIXED = 0.02


@dataclass(frozen=True, slots=True)
class KernelCurve:
    """``t(work) = fixed + work / (peak * efficiency)`` for one kernel family."""

    family: str  # "gemm", "attention", "elementwise"
    unit: str  # "FLOP" or "B"
    peak: float  # FLOP/s or B/s
    efficiency: float  # asymptotic fraction of the peak
    fixed: float  # seconds
    n_samples: int = 0
    source: str = "profile"  # or "fitted on N kernels of the trace"
    rms_rel_error: float = 0.0  # of the fit on its samples

    def time(self, work: float) -> float:
        return self.fixed + max(work, 0.0) / (self.peak * self.efficiency)

    def achieved(self, work: float) -> float:
        """Fraction of the peak a kernel of this much work reaches."""
        t = self.time(work)
        return work / (self.peak * t) if t > 0 else 0.0

    def half_work(self) -> float:
        """The work at which a kernel reaches half of the asymptotic efficiency."""
        return self.fixed * self.peak * self.efficiency

    def describe(self) -> str:
        peak = f"{self.peak / 1e12:.0f} TFLOP/s" if self.unit == "FLOP" else f"{self.peak / 1e12:.2f} TB/s"
        points = []
        for w in (1e6, 1e8, 1e10, 1e12) if self.unit == "FLOP" else (1e5, 1e7, 1e9):
            points.append(f"{_fmt(w)}{self.unit}: {100 * self.achieved(w):.0f}%")
        return (
            f"{self.family}: efficiency {100 * self.efficiency:.0f}% of {peak} + {self.fixed * 1e6:.1f} µs "
            f"per kernel (half efficiency at {_fmt(self.half_work())}{self.unit}); "
            + ", ".join(points)
            + f" [{self.source}]"
        )


def _fmt(x: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.3g} "


def profile_curves(gpu: GpuProfile | str | None = None, dtype_bytes: int = 2) -> dict[str, KernelCurve]:
    """The prior curves of a GPU profile (half precision on tensor cores unless dtype_bytes > 2)."""
    g = get_gpu(gpu)
    flops = g.peak_bf16_flops if dtype_bytes <= 2 else g.peak_fp32_flops
    return {
        "gemm": KernelCurve("gemm", "FLOP", flops, g.gemm_efficiency, g.gemm_fixed),
        "attention": KernelCurve(
            "attention", "FLOP", flops, g.attention_efficiency, _FIXED_PRIOR["attention"]
        ),
        "elementwise": KernelCurve(
            "elementwise", "B", g.hbm_bandwidth, g.memory_efficiency, _FIXED_PRIOR["elementwise"]
        ),
    }


def fit_curve(prior: KernelCurve, work: Sequence[float], seconds: Sequence[float]) -> KernelCurve:
    """The curve through measured kernels (work, seconds), pulled toward ``prior``.

    Minimises sum_i ((a + b w_i) / t_i - 1)^2 (relative errors: small and large kernels count alike)
    + w_a ((a - a0) / a0)^2 + w_b ((b - b0) / b0)^2 over a = fixed >= 0 and b = 1 / (peak *
    efficiency) > 0. Samples slower than the memory roofline would allow are the caller's to drop."""
    pts = [(float(w), float(t)) for w, t in zip(work, seconds, strict=True) if w > 0 and t > 0]
    if not pts:
        return prior
    a0 = prior.fixed
    b0 = 1.0 / (prior.peak * prior.efficiency)
    lam, lam_a = _PRIOR_WEIGHT, _PRIOR_WEIGHT_FIXED
    # Normal equations of the weighted problem in (a, b).
    s11 = sum(1 / t**2 for _, t in pts) + lam_a / a0**2
    s22 = sum(w**2 / t**2 for w, t in pts) + lam / b0**2
    s12 = sum(w / t**2 for w, t in pts)
    r1 = sum(1 / t for _, t in pts) + lam_a / a0
    r2 = sum(w / t for w, t in pts) + lam / b0
    det = s11 * s22 - s12 * s12
    a, b = (r1 * s22 - r2 * s12) / det, (r2 * s11 - r1 * s12) / det
    if a < 0:  # no fixed cost supported by the data: fit the slope alone
        a = 0.0
        b = r2 / s22
    if b <= 0:
        return prior
    efficiency = min(1.0, 1.0 / (prior.peak * b))
    rms = (sum(((a + w / (prior.peak * efficiency)) / t - 1) ** 2 for w, t in pts) / len(pts)) ** 0.5
    return replace(
        prior,
        efficiency=efficiency,
        fixed=a,
        n_samples=len(pts),
        source=f"fitted on {len(pts)} kernels of the trace, profile as prior",
        rms_rel_error=rms,
    )
