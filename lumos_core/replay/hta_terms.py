"""HTA's temporal breakdown, computed by HTA's definitions without its known bugs, so a user can put
Lumos's figures beside HolisticTraceAnalysis's.

HTA (0.5.0, ``get_temporal_breakdown``) keeps the profiler steps but the last, takes every device
activity of a rank, and reports over the span from the first activity's start to the last one's end:
idle = span minus the union of the activities, compute = the union of computation kernels, and
non-compute = the rest (memory copies/sets and communication not hidden under compute).

Where Lumos differs on purpose (HTA 0.5.0 bugs a cross-check found, each kept right by a test):

* device activities are told by their Kineto category (kernel, gpu_memcpy, gpu_memset,
  mtia_ccp_events, ...), never by an ``args.stream`` field: Triton ``cpu_op``s carry one and are not
  device work;
* the last step is not cut at the GPU-side annotation: an iteration ends with the last activity
  that belongs to it (:func:`lumos_core.replay.breakdown.iteration_windows`);
* timestamps keep their ns fractions (HTA rounds them to whole µs, losing 12-17 % of device time on
  short-kernel traces);
* an activity running inside the window counts as busy there whatever its launch time (HTA drops
  kernels launched before the window and counts their running time as idle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lumos_core.replay.breakdown import iteration_windows
from lumos_core.replay.intervals import total, union
from lumos_core.trace.kineto_schema import is_comm_kernel
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Kind, RankTrace


def temporal_breakdown(t: RankTrace) -> dict[str, Any] | None:
    """HTA-style temporal breakdown of one rank (see the module docstring); None without device
    activities. Over the profiler steps but the last when there are several (as HTA), else over
    the whole trace."""
    act = np.flatnonzero(np.isin(t.kind, GPU_ACTIVITY_KINDS))
    if len(act) == 0:
        return None
    s, e = t.start[act], t.start[act] + t.dur[act]
    windows = iteration_windows(t) if t.iterations else []
    if len(windows) > 1:
        lo, hi = windows[0].start, windows[-1].start
        s, e = np.maximum(s, lo), np.minimum(e, hi)
        keep = e > s
        act, s, e = act[keep], s[keep], e[keep]
        if len(act) == 0:
            return None
    span = int(e.max() - s.min())
    busy = total(*union(s, e))
    names = t.strings
    comm = np.asarray([is_comm_kernel(names[int(i)]) for i in t.name[act]], bool)
    memory = np.isin(t.kind[act], (Kind.MEMCPY, Kind.MEMSET)) | np.asarray(
        [_memory_name(names[int(i)]) for i in t.name[act]], bool
    )
    comp = ~comm & ~memory
    compute = total(*union(s[comp], e[comp])) if comp.any() else 0
    idle = span - busy
    return {
        "span_us": span / 1000,
        "idle_us": idle / 1000,
        "compute_us": compute / 1000,
        "non_compute_us": (busy - compute) / 1000,
        "idle_pct": round(100 * idle / span, 2) if span else 0.0,
        "compute_pct": round(100 * compute / span, 2) if span else 0.0,
        "activities": int(len(act)),
    }


def _memory_name(name: str) -> bool:
    """A copy or set recorded as a kernel (accelerators whose runtime has no separate category)."""
    n = name.lower()
    return n.startswith(("memcpy", "memset")) or " memcpy" in n or " memset" in n
