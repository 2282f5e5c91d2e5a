"""Sweeps: many configurations of one job estimated, as ``lumos sweep`` and ``job.sweep`` do.

* The grid: :func:`parse_grid` (``"dp=8,16 pp=1,2"``, knobs held in ``fixed``) gives a
  :class:`Grid` (its ``points()``: one dict of changes each); :func:`parse_values` reads one
  knob's values, :func:`default_values` proposes some around a current value.
* The engines that estimate the points: :class:`LocalEngine` (worker processes),
  :class:`RayEngine` (a Ray cluster); each is an :class:`Engine`.
* Running: :func:`run_grid` (a grid on an engine, ``on_row`` called as each row arrives) and
  :func:`sweep_axis` (one knob over values, in this thread, with a job's
  :class:`~lumos_core.whatif.estimate.Estimator`: its replay of the traced configuration is reused).
  Both return a :class:`SweepReport` whose rows are :class:`GridRow` (one per configuration,
  :func:`point_key` names it; a row of ``lumos sweep --out``'s CSV, :class:`ResultsFile`).
* :func:`pareto_front`: the rows no other row beats on both time and GPUs (or cost).
"""

from __future__ import annotations

from typing import Any

from lumos_core.progress import Progress, no_progress
from lumos_core.sweep.engines import Engine, LocalEngine, RayEngine, SweepContext
from lumos_core.sweep.grid import Grid, default_values, parse_grid, parse_values
from lumos_core.sweep.point import GridRow, point_key
from lumos_core.sweep.results import ResultsFile, pareto_front
from lumos_core.sweep.run import SweepReport, run_axis, run_grid
from lumos_core.whatif.estimate import Estimator


def sweep_axis(
    estimator: Estimator,
    knob: str,
    values: list[Any],
    *,
    fixed: dict[str, Any] | None = None,
    progress: Progress = no_progress,
) -> SweepReport:
    """``knob`` over ``values`` (``fixed`` held), estimated one after another in this thread with
    ``estimator`` (its baseline, graph and hardware profile): the rows of ``lumos sweep --grid
    KNOB=VALUES``, each what ``lumos estimate --KNOB VALUE`` prints; a value that is not a valid
    configuration becomes a skipped row with the reason."""
    context = SweepContext(estimator.job, estimator.graph, estimator.baseline, estimator.profile)
    context.kept = estimator  # its replay of the traced configuration, done once, reused
    return run_axis(
        estimator.job,
        knob,
        values,
        baseline=estimator.baseline,
        fixed=fixed,
        graph=estimator.graph,
        progress=progress,
        profile=estimator.profile,
        context=context,
    )


__all__ = [
    "Engine",
    "Grid",
    "GridRow",
    "LocalEngine",
    "RayEngine",
    "ResultsFile",
    "SweepReport",
    "default_values",
    "pareto_front",
    "parse_grid",
    "parse_values",
    "point_key",
    "run_grid",
    "sweep_axis",
]
