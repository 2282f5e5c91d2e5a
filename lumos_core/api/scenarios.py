"""What-if scenarios as an interactive front end shows them (the app's What-if panel).

A scenario is one run of the engine on a loaded job, summarised for display: a
:class:`ScenarioSummary` (measured, replayed and predicted outcome, one :class:`IterationRow` per
rank and iteration, notes) beside the engine's own result (a ``ReplayResult`` or an
:class:`EstimateResult`, whose ``explain(rank, event)`` says why a task was re-timed).

* :func:`replay_scenario`: the traced configuration replayed (the same iterations and errors as
  ``lumos replay``, without the critical paths);
* :func:`estimate_scenario`: a configuration estimated with a job's
  :class:`~lumos_core.whatif.estimate.Estimator` (exactly ``lumos estimate --json``'s figures);
* :func:`predict_from`: this job predicted from another measured job (``lumos validate OTHER THIS``),
  the error table in its notes;
* :func:`compare` two summaries (:class:`DeltaRow` per changed figure), :func:`explain_task`,
  :func:`traced_sources` (which traced rank each predicted rank comes from), :func:`rank_key`
  (how scenarios rank by throughput), :class:`Retiming` (why a task's duration changed);
* sessions (:class:`Session` of :class:`ScenarioSpec`, :func:`save_session`/:func:`load_session`,
  files ending in :data:`SESSION_SUFFIX`) and a prediction written as Kineto traces
  (:func:`write_job`, :func:`default_out_name`, :func:`refuse_inside_traces`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lumos_core.compare.validate import prediction_scenario, validate_jobs
from lumos_core.graph.model import ExecutionGraph
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.replay.idle import stalls_note
from lumos_core.replay.run import ReplayResult, replay
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Job as TracedJob
from lumos_core.whatif.config import Baseline
from lumos_core.whatif.estimate import EstimateResult, Estimator
from lumos_core.whatif.export import default_out_name, refuse_inside_traces, write_job
from lumos_core.whatif.retime import Retiming
from lumos_core.whatif.scenario import (
    DeltaRow,
    IterationRow,
    ScenarioSummary,
    compare,
    explain_task,
    summarize_estimate,
    summarize_replay,
    traced_sources,
)
from lumos_core.whatif.session import SUFFIX as SESSION_SUFFIX
from lumos_core.whatif.session import ScenarioSpec, Session, load_session, save_session
from lumos_core.whatif.throughput import rank_key


def replay_scenario(
    data: TracedJob,
    graph: ExecutionGraph,
    baseline: Baseline,
    name: str = "baseline replay",
    *,
    keep_stalls: bool = False,
    progress: Progress = no_progress,
) -> tuple[ScenarioSummary, ReplayResult]:
    """The traced configuration replayed on ``graph`` (built with ``keep_stalls``, which its note
    reports) and summarised against the measured iterations."""
    t0 = time.perf_counter()  # the "computed in" the app shows: the engine times nothing itself
    result = replay(data, progress=scaled(progress, 0.0, 0.9), graph=graph, critical_paths=False)
    seconds = time.perf_counter() - t0
    progress(0.95, "comparing with the measured iterations")
    summary = summarize_replay(data, result, baseline, name, seconds)
    if note := stalls_note(keep_stalls, graph.unexplained_ns):
        summary.notes.append(note)
    return summary, result


def estimate_scenario(
    estimator: Estimator,
    changes: dict[str, Any],
    name: str | None = None,
    *,
    keep_stalls: bool = False,
    progress: Progress = no_progress,
) -> tuple[ScenarioSummary, EstimateResult]:
    """The job of ``estimator`` with ``changes`` (knob -> value), estimated and summarised;
    ``keep_stalls``: how the estimator's graph was built (its note reports it)."""
    result = estimator.estimate(changes, progress=scaled(progress, 0.0, 0.9))
    progress(0.95, "summarising the prediction")
    summary = summarize_estimate(estimator.job, result, changes, name)
    if estimator.graph is not None and (note := stalls_note(keep_stalls, estimator.graph.unexplained_ns)):
        summary.notes.append(note)
    return summary, result


def predict_from(
    data: TracedJob, source: str | Path, name: str | None = None, *, progress: Progress = no_progress
) -> tuple[ScenarioSummary, EstimateResult]:
    """``data`` predicted from the measured job at ``source`` (``lumos validate SOURCE THIS``): the
    knobs that differ become the what-if of the other job; the scenario is measured against
    ``data`` and carries the error table in its notes."""
    other = load_job(source, progress=scaled(progress, 0.0, 0.35), workers=1)
    v = validate_jobs(other, data, progress=scaled(progress, 0.35, 0.95))
    progress(0.97, "measuring the prediction against this job")
    summary = prediction_scenario(data, v, name or f"predicted from {Path(source).name}")
    return summary, v.result


__all__ = [
    "SESSION_SUFFIX",
    "DeltaRow",
    "EstimateResult",
    "IterationRow",
    "ReplayResult",
    "Retiming",
    "ScenarioSpec",
    "ScenarioSummary",
    "Session",
    "compare",
    "default_out_name",
    "estimate_scenario",
    "explain_task",
    "load_session",
    "predict_from",
    "rank_key",
    "refuse_inside_traces",
    "replay_scenario",
    "save_session",
    "traced_sources",
    "write_job",
]
