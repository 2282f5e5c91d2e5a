"""Host-side time (Python, framework dispatch, launch calls) scaled by a factor: the ``cpu_scale``
knob. A trace recorded under the profiler, or without CUDA graphs / ``torch.compile``, can be paced
by its CPU thread; scaling the host side answers "what if it were not" (0.3: roughly what CUDA
graphs leave of it; 0: an infinitely fast host, i.e. the GPU-bound time)."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.whatif.retime.plan import RetimePlan

__all__ = ["host_lag_ratio", "scale_host"]

_HOST_EDGES = (EdgeKind.CPU_THREAD, EdgeKind.CPU_CROSS)


def host_lag_ratio(graph: ExecutionGraph, factor: float, current: np.ndarray | None = None) -> np.ndarray:
    """Per start-dependency: the ratio for its lag (the CPU time between two host tasks)."""
    out = np.ones(len(graph.sp_src)) if current is None else current.copy()
    out[np.isin(graph.sp_kind, [int(k) for k in _HOST_EDGES])] *= factor
    return out


def scale_host(graph: ExecutionGraph, plan: RetimePlan, factor: float) -> None:
    """Every CPU task and the CPU time between them x ``factor`` (GPU work untouched)."""
    if factor == 1.0:
        return
    cpu = np.flatnonzero((graph.node_type == NodeType.CPU) & (graph.event >= 0))
    plan.apply(cpu, factor, "host (CPU) tasks", f"x{factor:g} (--cpu-scale)", "and the CPU time between them")
    plan.lag_ratio = host_lag_ratio(graph, factor, plan.lag_ratio)
