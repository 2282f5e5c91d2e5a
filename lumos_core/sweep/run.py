"""Run a grid sweep: every configuration of a :class:`~lumos_core.sweep.grid.Grid`, estimated by an
engine (:mod:`lumos_core.sweep.engines`), each finished row appended to the results file at once.
A one-knob sweep is the one-axis case (:func:`run_axis`).

Configurations already in the results file are not estimated again (resume); invalid ones become
skipped rows without reaching a worker. ``progress`` sees the fraction of the configurations left
to estimate (so its ETA is about this run) and may raise
:class:`~lumos_core.errors.Cancelled` to stop: the engine's work stops and the rows written so far
stay in the file.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import ExecutionGraph
from lumos_core.perf.profile import HardwareProfile
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.sweep.engines import Engine, InProcessEngine, SweepContext
from lumos_core.sweep.grid import Grid, axis_grid, invalid_reason
from lumos_core.sweep.point import GridRow, point_key, skipped_row
from lumos_core.sweep.results import ResultsFile
from lumos_core.trace.model import Job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.config import Baseline

_TICK_S = 0.25  # a long estimate still lets progress run (cancel, ETA) this often


@dataclass
class SweepReport:
    """A finished (or resumed) sweep: its rows in grid order and what this run did."""

    grid: Grid
    rows: list[GridRow]
    resumed: int  # rows read back from the results file
    estimated: int  # configurations the engine estimated in this run
    skipped: int  # invalid configurations (in this run)
    seconds: float  # this run, from start to the last row
    engine: str
    workers: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "grid": {"knobs": self.grid.knobs, "fixed": self.grid.fixed},
            "configurations": len(self.rows),
            "resumed": self.resumed,
            "estimated": self.estimated,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "engine": self.engine,
            "workers": self.workers,
        }


def run_grid(
    job: Job,
    grid: Grid,
    engine: Engine,
    *,
    baseline: Baseline | None = None,
    graph: ExecutionGraph | None = None,
    results: ResultsFile | None = None,
    progress: Progress = no_progress,
    on_row: Callable[[GridRow], None] | None = None,
    profile: HardwareProfile | None = None,
    context: SweepContext | Callable[[], SweepContext] | None = None,
) -> SweepReport:
    """See the module docstring. ``on_row`` sees every new row as it is recorded. ``context``: the
    job's sweep context when the caller keeps one (with its estimator: see the public API's
    ``Job.sweep``), or what makes it (called only when something is left to estimate); else one is
    made from ``job``, ``graph``, ``baseline`` and ``profile``."""
    t0 = time.perf_counter()
    baseline = baseline or infer_baseline(job)
    rows: dict[str, GridRow] = dict(results.done) if results is not None else {}
    points = grid.points()

    def record(row: GridRow) -> None:
        rows[row.key] = row
        if results is not None:
            results.append(row)
        if on_row is not None:
            on_row(row)

    todo: list[dict[str, Any]] = []
    resumed = skipped = 0
    for changes in points:
        if point_key(changes) in rows:
            resumed += 1
            continue
        reason = invalid_reason(baseline, changes)
        if reason:
            record(skipped_row(baseline, changes, reason))
            skipped += 1
        else:
            todo.append(changes)
    estimated = 0
    if todo:
        progress(0.0, "building the execution graph")
        if callable(context):
            context = context()
        if context is None:
            graph = graph or build_graph(job, progress=scaled(progress, 0.0, 0.0))
            context = SweepContext(job, graph, baseline, profile)
        progress(0.0, f"0/{len(todo)} configurations ({engine.name} engine, {engine.workers} workers)")
        last = ""
        with contextlib.closing(engine.run(context, todo, _TICK_S)) as finished:
            for item in finished:
                if item is not None:  # None: nothing finished for a while (ETA refresh, cancel)
                    row = item[1]
                    record(row)
                    estimated += 1
                    skipped += not row.ok
                    last = row.key
                progress(
                    estimated / len(todo), f"{estimated}/{len(todo)} configurations" + (last and f"; {last}")
                )
    if not todo:
        progress(1.0, f"{len(points)} configurations, nothing left to estimate")
    return SweepReport(
        grid=grid,
        rows=[rows[point_key(c)] for c in points],
        resumed=resumed,
        estimated=estimated,
        skipped=skipped,
        seconds=time.perf_counter() - t0,
        engine=engine.name,
        workers=engine.workers,
    )


def run_axis(
    job: Job,
    knob: str,
    values: list[Any],
    *,
    fixed: dict[str, Any] | None = None,
    baseline: Baseline | None = None,
    graph: ExecutionGraph | None = None,
    progress: Progress = no_progress,
    profile: HardwareProfile | None = None,
    context: SweepContext | None = None,
) -> SweepReport:
    """Sweep one knob: the one-axis grid ``knob=values`` (``fixed`` held), estimated in this
    thread one value after another (:class:`~lumos_core.sweep.engines.InProcessEngine`). Its rows
    are those of ``lumos sweep --grid KNOB=VALUES`` and each is what ``lumos estimate --KNOB VALUE``
    prints; a value that is not a valid configuration becomes a skipped row with the reason.
    ``context``: as for :func:`run_grid` (a caller's kept estimator)."""
    grid = axis_grid(knob, values, fixed)
    return run_grid(
        job,
        grid,
        InProcessEngine(progress),
        baseline=baseline,
        graph=graph,
        progress=progress,
        profile=profile,
        context=context,
    )
