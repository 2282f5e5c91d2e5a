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
* collectives: the NCCL model of :mod:`lumos_core.perf.nccl` (algorithm and protocol picked per
  collective, hops and link ceilings from the group's node layout), calibrated on the trace's own
  collectives labelled intra- or inter-node, at the new group size, message size and node layout.
* hardware: compute-bound work by the ratio of peak FLOP/s, memory-bound work by the ratio of
  memory bandwidth, communication by link bandwidth.

:func:`plan_retiming` (``planner``) applies every rule of ``rules.RULES`` for one configuration
change, in order, to a :class:`RetimeContext` (``context``: the inputs every rule reads, built once):
``compute`` (GPU kernels for new shapes, added tensor parallelism), ``cpu_ops`` (CPU-only traces),
``comm`` (collectives), ``host`` and the hardware ratios of ``ratios``; ``families`` says which model
a node gets and ``plan`` holds the result. A new what-if knob that changes durations gets its rule
in ``RULES``, under the name its entry in :mod:`lumos_core.whatif.knob_registry` gives.
"""

from lumos_core.whatif.retime.comm import comm_model_from_trace
from lumos_core.whatif.retime.context import RetimeContext
from lumos_core.whatif.retime.families import family_of_nodes
from lumos_core.whatif.retime.plan import RetimePlan, Retiming
from lumos_core.whatif.retime.planner import plan_retiming
from lumos_core.whatif.retime.ratios import (
    collective_ratio,
    dims_ratio,
    gemm_flop_ratio,
    gemm_ratio,
    hardware_ratio,
    layer_gemm_flops,
    safe_ratio,
    value_map,
    width_map,
)
from lumos_core.whatif.retime.rules import RULES

__all__ = [
    "RULES",
    "RetimeContext",
    "RetimePlan",
    "Retiming",
    "collective_ratio",
    "comm_model_from_trace",
    "dims_ratio",
    "family_of_nodes",
    "gemm_flop_ratio",
    "gemm_ratio",
    "hardware_ratio",
    "layer_gemm_flops",
    "plan_retiming",
    "safe_ratio",
    "value_map",
    "width_map",
]
