"""Sweep one knob: run :func:`~lumos_core.whatif.estimate.estimate` for each value and collect the
iteration time and breakdown (the app draws them as a chart; each point is what ``lumos estimate
--KNOB VALUE`` prints).

A value that is not a valid configuration (e.g. a PP that does not divide the layers) becomes a
point with its error instead of stopping the sweep; cancelling (the progress callback raising
:class:`~lumos_core.errors.Cancelled`) stops it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import ExecutionGraph
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.replay.breakdown import Breakdown
from lumos_core.sweep.grid import default_values, parse_values  # noqa: F401  (re-exported)
from lumos_core.sweep.point import estimate_point
from lumos_core.trace.model import Job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.config import Baseline
from lumos_core.whatif.knobs import coerce_value


@dataclass
class SweepPoint:
    knob: str
    value: Any
    world_size: int
    iteration_us: float  # NaN when the value failed
    breakdown: Breakdown | None
    change_pct: float  # vs the replayed baseline
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class SweepRow:
    """A sweep point flattened for CSV."""

    knob: str
    value: str
    gpus: int
    iteration_ms: float
    exposed_compute_ms: float
    overlapped_ms: float
    exposed_comm_ms: float
    idle_ms: float
    change_pct: float
    error: str


def sweep_rows(points: list[SweepPoint]) -> list[SweepRow]:
    rows = []
    for p in points:
        b = p.breakdown
        parts = (
            [b.exposed_compute_ns / 1e6, b.overlapped_ns / 1e6, b.exposed_comm_ns / 1e6, b.other_ns / 1e6]
            if b is not None
            else [math.nan] * 4
        )
        rows.append(
            SweepRow(p.knob, str(p.value), p.world_size, p.iteration_us / 1000, *parts, p.change_pct, p.error)
        )
    return rows


def sweep(
    job: Job,
    knob: str,
    values: list[Any],
    *,
    baseline: Baseline | None = None,
    fixed: dict[str, Any] | None = None,
    graph: ExecutionGraph | None = None,
    progress: Progress = no_progress,
) -> list[SweepPoint]:
    """Estimate ``fixed`` plus ``knob=value`` for every value (see the module docstring)."""
    baseline = baseline or infer_baseline(job)
    n = max(len(values), 1)
    graph = graph or build_graph(job, progress=scaled(progress, 0.0, 0.1))
    points: list[SweepPoint] = []
    for k, value in enumerate(values):
        changes = {**(fixed or {}), knob: coerce_value(knob, value)}
        sub = scaled(progress, 0.1 + 0.9 * k / n, 0.1 + 0.9 * (k + 1) / n)
        row = estimate_point(job, graph, baseline, changes, progress=sub)  # as every grid sweep
        points.append(
            SweepPoint(knob, value, row.world_size, row.iteration_us, row.breakdown, row.change_pct)
            if row.ok
            else SweepPoint(knob, value, row.world_size, math.nan, None, math.nan, row.note)
        )
        if row.ok:
            sub(1.0, f"{knob} = {value}: {row.iteration_us / 1000:.2f} ms")
    return points
