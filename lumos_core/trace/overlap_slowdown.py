"""How much slower compute kernels run while an NCCL kernel runs beside them, measured from a trace.

NCCL kernels take SMs and memory bandwidth from the compute kernels they overlap. The trace itself
shows by how much: the same kernel (same name, same launch grid) is timed both alone and while a
communication kernel runs on another stream of the same GPU. The slowdown is the median, over
kernels seen both ways (at least ``min_each`` times each), of median(overlapped) / median(alone),
weighted by how often the kernel ran overlapped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.trace.kernel_families import Family, classify_names
from lumos_core.trace.model import Job, Kind

__all__ = ["OverlapSlowdown", "measure_overlap_slowdown"]


@dataclass(frozen=True, slots=True)
class OverlapSlowdown:
    """Compute-kernel time while overlapping communication / time alone (1.0: no interference)."""

    factor: float
    kernels: int  # distinct kernels seen both ways
    samples: int  # overlapped executions behind the figure

    def describe(self) -> str:
        if not self.kernels:
            return "compute/communication interference: not measurable (no kernel seen both alone and overlapped)"
        return (
            f"compute/communication interference: kernels overlapping NCCL run x{self.factor:.3f} "
            f"(median over {self.kernels} kernels seen both ways, {self.samples} overlapped runs; "
            "measured, reported only: estimates keep each kernel's measured time)"
        )


def measure_overlap_slowdown(job: Job, min_each: int = 3) -> OverlapSlowdown:
    ratios: list[tuple[float, int]] = []
    for t in job.ranks:
        fam = classify_names(t.strings)
        gpu = np.flatnonzero(t.kind == Kind.KERNEL)
        if len(gpu) == 0:
            continue
        f = fam[t.name[gpu]]
        is_comm = (f >= Family.NCCL_ALL_REDUCE) & (f <= Family.NCCL_OTHER)
        comm, comp = gpu[is_comm], gpu[~is_comm]
        if len(comm) == 0 or len(comp) == 0:
            continue
        cs = np.sort(t.start[comm])
        ce = np.maximum.accumulate((t.start[comm] + t.dur[comm])[np.argsort(t.start[comm])])
        mid = t.start[comp] + t.dur[comp] // 2
        k = np.searchsorted(cs, mid, side="right") - 1
        overlapped = (k >= 0) & (ce[np.maximum(k, 0)] > mid)
        groups: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
        for e, ov in zip(comp.tolist(), overlapped.tolist()):
            # Same kernel = same name and launch grid (a GEMM's tiles follow its shape).
            key = (int(t.name[e]), str(t.args_of(e).get("grid")))
            g = groups.setdefault(key, ([], []))
            g[1 if ov else 0].append(int(t.dur[e]))
        for alone, over in groups.values():
            if len(alone) >= min_each and len(over) >= min_each:
                a = float(np.median(alone))
                if a > 0:
                    ratios.append((float(np.median(over)) / a, len(over)))
    if not ratios:
        return OverlapSlowdown(1.0, 0, 0)
    r = np.asarray([x for x, _ in ratios])
    w = np.asarray([n for _, n in ratios], float)
    order = np.argsort(r)
    cum = np.cumsum(w[order])
    factor = float(r[order][np.searchsorted(cum, cum[-1] / 2)])
    return OverlapSlowdown(factor, len(ratios), int(w.sum()))
