"""The words every what-if headline shares: rate per GPU and MFU beside iteration time, the change
that ranks a scenario (throughput when it does different work per iteration, else iteration time),
and the CPU-paced warning with its one-click "assume GPU-bound".

The numbers are the engine's (:mod:`lumos_core.whatif.throughput`); these helpers only word them,
so the overlay title, the Prediction tab, the scenario list, Compare and the sweep views say the
same thing.
"""

from __future__ import annotations

import math
from typing import Any

from lumos_core.api.knobs import GPU_BOUND_CPU_SCALE, MODEL_KNOBS
from lumos_core.api.scenarios import ScenarioSummary


def rate_text(s: ScenarioSummary) -> str:
    """``"41,250 tokens/s/GPU, MFU 38.2 %"``."""
    return s.throughput.text()


def ranking_change(s: ScenarioSummary, baseline: ScenarioSummary | None) -> tuple[float, str]:
    """(change in %, what it measures) against ``baseline``: throughput per GPU (higher is better)
    when ``s`` does different work per iteration (model FLOP/s per GPU when it changes the model),
    else iteration time (lower is better)."""
    if baseline is None:
        return (s.change_pct, "iteration")
    if s.work_changed:
        a, b = baseline.throughput.flops_per_s_per_gpu, s.throughput.flops_per_s_per_gpu
        if any(k in MODEL_KNOBS for k in s.changes) and a and not (math.isnan(a) or math.isnan(b)):
            return (100.0 * (b / a - 1), "FLOP/s")  # a smaller model's tokens/s is no gain
        c = s.throughput.change_pct(baseline.throughput)
        if not math.isnan(c):
            return (c, "throughput")
    r = baseline.iteration_us
    return (100.0 * (s.iteration_us / r - 1) if r else 0.0, "iteration")


def cpu_paced_text(s: ScenarioSummary) -> str:
    """The headline's warning when the host hid this GPU what-if ("" when it did not)."""
    share = s.cpu_paced
    if share is None:
        return ""
    return (
        f"CPU-paced by {100 * share:.0f} %: the host (Python, launch calls) sets this trace's pace, so "
        f"this GPU what-if barely moves the iteration ({s.change_pct:+.1f} %)."
    )


def gpu_bound_changes(s: ScenarioSummary) -> dict[str, Any]:
    """The scenario's changes with the host time scaled as "assume GPU-bound" does."""
    return {**s.changes, "cpu_scale": GPU_BOUND_CPU_SCALE}
