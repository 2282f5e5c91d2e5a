"""Run replays, estimates and sweeps of the open job in the background, one at a time.

:class:`WhatIfRunner` owns the job's baseline, a cache of its execution graph (built once, then
passed to every ``replay``/``estimate`` as ``graph=``) and of its
:class:`~lumos_core.api.Estimator` (the traced configuration replayed once for every estimate
while the baseline and the hardware profile stay the same), and the queue of requests. Two ways in:

* :meth:`WhatIfRunner.request` (a click): the new request *supersedes* whatever runs or waits: the
  running task is cancelled (its progress callback raises ``Cancelled``) and its result, should it
  still arrive, is dropped because its token is no longer the current one. The automatic baseline
  replay is the exception: superseded, it is queued again behind the new request, so the overlay of
  the traced configuration always ends up there.
* :meth:`WhatIfRunner.enqueue` (a reopened session, ``--estimate`` on the command line): runs after
  what is already queued.

Every number comes from the same engine calls as the CLI (``replay(..., critical_paths=False)``:
the same iterations and errors as ``lumos replay``, without the critical-path walk the app does not
show; ``Estimator.estimate(changes)``: exactly ``lumos estimate --json``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.jobs import BackgroundTask
from app.view_model.loaded_job import LoadedJob, infer_job_baseline
from app.view_model.overlay_data import PredictedOverlay, build_overlay
from lumos_core.api import Estimator
from lumos_core.api.knobs import Baseline, HardwareProfile, format_changes
from lumos_core.api.loading import build_graph
from lumos_core.api.scenarios import (
    EstimateResult,
    ReplayResult,
    ScenarioSummary,
    estimate_scenario,
    predict_from,
    replay_scenario,
)
from lumos_core.api.sweep import GridRow, SweepReport, sweep_axis
from lumos_core.graph.model import ExecutionGraph
from lumos_core.progress import Progress, scaled
from lumos_core.trace.model import Job, RankTrace

BASELINE_NAME = "baseline replay"


@dataclass
class Request:
    kind: str  # "replay", "estimate" or "sweep"
    changes: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    knob: str = ""
    values: list[Any] = field(default_factory=list)
    auto: bool = False  # the baseline replay started when the job opened
    source: str = ""  # predict_from: the other job's trace folder
    requested_at: float = field(default_factory=time.perf_counter)

    @property
    def label(self) -> str:
        if self.kind == "replay":
            return "replaying the traced configuration"
        if self.kind == "sweep":
            return f"sweeping {self.knob} over {len(self.values)} values"
        if self.kind == "predict_from":
            return f"predicting this job from {self.source}"
        return f"estimating {self.name or format_changes(self.changes)}"


@dataclass
class Scenario:
    """One finished run: its numbers, the engine's result (for the why of every task) and the
    predicted ranks arranged for the timeline."""

    id: int
    summary: ScenarioSummary
    result: ReplayResult | EstimateResult
    overlay: PredictedOverlay
    overrides: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0  # request to result
    profile: str = ""  # the hardware profile file the estimate used ("" = built-in models)

    @property
    def name(self) -> str:
        return self.summary.name

    @property
    def kind(self) -> str:
        return self.summary.kind

    @property
    def changes(self) -> dict[str, Any]:
        return self.summary.changes


@dataclass
class SweepOutcome:
    """A finished one-knob sweep: the one-axis grid's report (one row per value, in order)."""

    knob: str
    values: list[Any]
    report: SweepReport
    seconds: float

    @property
    def rows(self) -> list[GridRow]:
        return self.report.rows


class GraphCache:
    """The job's execution graph, built by the first run that needs it (thread-safe: a second run
    waits for the first build instead of building again). The graph is only read afterwards."""

    def __init__(self, job: Job, keep_stalls: bool = False, graph: ExecutionGraph | None = None) -> None:
        self.job = job
        self.keep_stalls = keep_stalls  # unexplained GPU delays kept as fixed waits
        self.graph: ExecutionGraph | None = None if keep_stalls else graph  # one built at load
        self.build_s = 0.0
        self._lock = threading.Lock()
        self._estimator: Estimator | None = None

    def get(self, progress: Progress) -> ExecutionGraph:
        with self._lock:
            if self.graph is None:
                t0 = time.perf_counter()
                # compiles (or loads) the graph and replay kernels first, here on the worker
                self.graph = build_graph(self.job, keep_stalls=self.keep_stalls, progress=progress)
                self.build_s = time.perf_counter() - t0
            else:
                progress(1.0, "execution graph ready")
            return self.graph

    def estimator(
        self, graph: ExecutionGraph, baseline: Baseline, profile: HardwareProfile | None
    ) -> Estimator:
        """The job's estimator for ``baseline`` and ``profile``: kept while both stay the same
        objects, so the traced configuration is replayed once for all their estimates."""
        with self._lock:
            e = self._estimator
            if e is None or e.graph is not graph or e.baseline is not baseline or e.profile is not profile:
                e = self._estimator = Estimator(self.job, baseline=baseline, graph=graph, profile=profile)
            return e


# ---------------------------------------------------------------- work (runs on a worker thread)


def arrange_overlay(
    loaded: LoadedJob, timeline: list[RankTrace], summary: ScenarioSummary, progress: Progress, done: str
) -> PredictedOverlay:
    """The last step of every prediction: its ranks arranged over the measured ones."""
    progress(0.94, "arranging the predicted ranks")
    overlay = build_overlay(loaded, timeline, summary)
    progress(1.0, done)
    return overlay


def replay_work(
    loaded: LoadedJob, baseline: Baseline, cache: GraphCache, name: str
) -> Callable[..., tuple[ScenarioSummary, ReplayResult, PredictedOverlay]]:
    def work(progress: Progress, _on_file: object) -> tuple[ScenarioSummary, ReplayResult, PredictedOverlay]:
        graph = cache.get(scaled(progress, 0.0, 0.4))
        summary, result = replay_scenario(
            loaded.job,
            graph,
            baseline,
            name,
            keep_stalls=cache.keep_stalls,
            progress=scaled(progress, 0.4, 0.9),
        )
        overlay = arrange_overlay(loaded, result.timeline, summary, progress, "replay done")
        return summary, result, overlay

    return work


def estimate_work(
    loaded: LoadedJob,
    baseline: Baseline,
    cache: GraphCache,
    changes: dict[str, Any],
    name: str | None,
    profile: HardwareProfile | None = None,
) -> Callable[..., tuple[ScenarioSummary, EstimateResult, PredictedOverlay]]:
    def work(
        progress: Progress, _on_file: object
    ) -> tuple[ScenarioSummary, EstimateResult, PredictedOverlay]:
        graph = cache.get(scaled(progress, 0.0, 0.3))
        estimator = cache.estimator(graph, baseline, profile)
        summary, result = estimate_scenario(
            estimator, changes, name, keep_stalls=cache.keep_stalls, progress=scaled(progress, 0.3, 0.9)
        )
        overlay = arrange_overlay(loaded, result.timeline, summary, progress, "estimate done")
        return summary, result, overlay

    return work


def predict_from_work(
    loaded: LoadedJob, source: str, name: str | None
) -> Callable[..., tuple[ScenarioSummary, EstimateResult, PredictedOverlay]]:
    """This job predicted from another one (``lumos validate SOURCE THIS``): the knobs that differ
    become the what-if of the other job, drawn over this one with the error table in its notes."""

    def work(
        progress: Progress, _on_file: object
    ) -> tuple[ScenarioSummary, EstimateResult, PredictedOverlay]:
        summary, result = predict_from(loaded.job, source, name, progress=scaled(progress, 0.0, 0.9))
        overlay = arrange_overlay(loaded, result.timeline, summary, progress, "prediction done")
        return summary, result, overlay

    return work


def sweep_work(
    loaded: LoadedJob,
    baseline: Baseline,
    cache: GraphCache,
    knob: str,
    values: list[Any],
    fixed: dict[str, Any],
    profile: HardwareProfile | None = None,
) -> Callable[..., SweepReport]:
    def work(progress: Progress, _on_file: object) -> SweepReport:
        graph = cache.get(scaled(progress, 0.0, 0.15))
        estimator = cache.estimator(graph, baseline, profile)  # the estimates' own, its replay reused
        return sweep_axis(estimator, knob, values, fixed=fixed, progress=scaled(progress, 0.15, 1.0))

    return work


# ---------------------------------------------------------------- the runner (GUI thread)


class WhatIfRunner(QObject):
    """See the module docstring. Signals are delivered on the GUI thread."""

    started = Signal(object)  # Request
    progressed = Signal(float, str)
    scenario_ready = Signal(object)  # Scenario
    sweep_ready = Signal(object)  # SweepOutcome
    failed = Signal(object, str)  # Request, message
    cancelled = Signal(object)  # Request
    idle = Signal()  # nothing running, nothing queued
    baseline_changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.loaded: LoadedJob | None = None
        self.baseline: Baseline | None = None
        self.baseline_error = ""
        self.overrides: dict[str, Any] = {}
        self.keep_stalls = False  # unexplained GPU delays kept as fixed waits (View menu)
        # a hardware profile fitted by lumos calibrate (What-if > Hardware Profile...), for estimates
        # and sweeps from now on
        self.profile: HardwareProfile | None = None
        self.profile_path = ""
        self.cache: GraphCache | None = None
        self._token = 0
        self._current: int | None = None  # token of the task whose result is wanted
        self._current_request: Request | None = None
        self._tasks: dict[int, BackgroundTask] = {}
        self._requests: dict[int, Request] = {}
        self._queue: deque[Request] = deque()
        self._next_id = 0
        self._closed = False  # after shutdown (the window closes) nothing starts again

    # ---- state
    @property
    def busy(self) -> bool:
        return self._current is not None or bool(self._queue)

    @property
    def running(self) -> Request | None:
        return self._current_request

    @property
    def queued(self) -> list[Request]:
        return list(self._queue)

    @property
    def live_threads(self) -> int:
        return len(self._tasks)

    def set_job(self, loaded: LoadedJob | None, overrides: dict[str, Any] | None = None) -> None:
        """Forget the previous job (cancelling its runs: a result already on its way is dropped by
        its token) and take ``loaded``'s baseline."""
        self._queue.clear()
        self._drop_current()
        self.loaded = loaded
        self.overrides = dict(overrides or {})
        self.cache = GraphCache(loaded.job, self.keep_stalls, loaded.graph) if loaded is not None else None
        if loaded is None:
            self.baseline, self.baseline_error = None, ""
        elif self.overrides:
            self.baseline, self.baseline_error = infer_job_baseline(loaded.job, self.overrides)
        else:
            self.baseline, self.baseline_error = loaded.baseline, loaded.baseline_error
        self.baseline_changed.emit()

    def set_keep_stalls(self, keep: bool) -> bool:
        """Keep (or not) the trace's unexplained GPU delays in replays and what-ifs: a new graph
        for the runs that follow. True when it changed."""
        if keep == self.keep_stalls:
            return False
        self.keep_stalls = keep
        if self.loaded is not None:
            self.cache = GraphCache(self.loaded.job, keep, self.loaded.graph)
        return True

    def set_overrides(self, overrides: dict[str, Any]) -> None:
        """Baseline values given by the user (what the trace does not record)."""
        if self.loaded is None or overrides == self.overrides:
            return
        self.overrides = dict(overrides)
        self.baseline, self.baseline_error = infer_job_baseline(self.loaded.job, self.overrides or None)
        self.baseline_changed.emit()

    # ---- requests
    def request(self, req: Request) -> bool:
        """Run ``req`` now, superseding what runs and what waits (see the module docstring)."""
        if not self._can_run():
            return False
        requeue = [r for r in [self._current_request, *self._queue] if r is not None and r.auto]
        self._queue.clear()
        self._drop_current()
        self._start(req)
        self._queue.extend(requeue[:1])
        return True

    def enqueue(self, req: Request) -> bool:
        """Run ``req`` after everything already queued."""
        if not self._can_run():
            return False
        if self._current is None:
            self._start(req)
        else:
            self._queue.append(req)
        return True

    def cancel(self) -> None:
        """Stop the running task and forget the queue (the user pressed Cancel). Its result is
        dropped even if it was already on its way; the thread ends at its next progress report."""
        self._queue.clear()
        req = self._current_request
        if req is None:
            return
        self._drop_current()
        self.cancelled.emit(req)
        self.idle.emit()

    def shutdown(self, timeout_ms: int = 60_000) -> None:
        """Cancel and wait for every task (before the window goes away); nothing starts after it."""
        self._closed = True
        self._queue.clear()
        for task in self._tasks.values():
            task.cancel()
        for token, task in list(self._tasks.items()):
            task.wait(timeout_ms)
            self._tasks.pop(token, None)
        self._current = None
        self._current_request = None

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # ---- internals
    def _can_run(self) -> bool:
        ready = self.loaded is not None and self.baseline is not None and self.cache is not None
        return ready and not self._closed

    def _drop_current(self) -> None:
        if self._current is not None:
            task = self._tasks.get(self._current)
            if task is not None:
                task.cancel()
        self._current = None
        self._current_request = None

    def _start(self, req: Request) -> None:
        assert self.loaded is not None and self.baseline is not None and self.cache is not None
        self._token += 1
        token = self._token
        if req.kind == "replay":
            fn = replay_work(self.loaded, self.baseline, self.cache, req.name or BASELINE_NAME)
        elif req.kind == "predict_from":
            fn = predict_from_work(self.loaded, req.source, req.name)
        elif req.kind == "sweep":
            fn = sweep_work(
                self.loaded, self.baseline, self.cache, req.knob, req.values, dict(req.changes), self.profile
            )
        else:
            fn = estimate_work(
                self.loaded, self.baseline, self.cache, dict(req.changes), req.name, self.profile
            )
        task = BackgroundTask(fn, token)
        task.progressed.connect(self._on_progress)
        task.succeeded.connect(self._on_succeeded)
        task.failed.connect(self._on_failed)
        task.cancelled.connect(self._on_cancelled)
        task.finished.connect(self._on_finished)
        self._tasks[token] = task
        self._requests[token] = req
        self._current = token
        self._current_request = req
        self.started.emit(req)
        task.start()

    def _on_progress(self, token: int, fraction: float, message: str) -> None:
        if token == self._current:
            self.progressed.emit(fraction, message)

    def _on_succeeded(self, token: int, payload: object) -> None:
        if token != self._current:
            return  # superseded: nobody wants this result any more
        req = self._requests[token]
        seconds = time.perf_counter() - req.requested_at
        if req.kind == "sweep":
            assert isinstance(payload, SweepReport)
            self.sweep_ready.emit(SweepOutcome(req.knob, list(req.values), payload, seconds))
            return
        summary, result, overlay = payload  # type: ignore[misc]
        self.scenario_ready.emit(
            Scenario(
                self.new_id(),
                summary,
                result,
                overlay,
                dict(self.overrides),
                seconds,
                self.profile_path if req.kind == "estimate" else "",
            )
        )

    def _on_failed(self, token: int, message: str) -> None:
        if token == self._current:
            self.failed.emit(self._requests[token], message)

    def _on_cancelled(self, token: int) -> None:
        if token == self._current:
            self.cancelled.emit(self._requests[token])

    def _on_finished(self, token: int) -> None:
        task = self._tasks.pop(token, None)
        self._requests.pop(token, None)
        if task is not None:
            task.wait()
            task.deleteLater()
        if token != self._current:
            return
        self._current = None
        self._current_request = None
        if self._queue and self._can_run():
            self._start(self._queue.popleft())
        else:
            self.idle.emit()
