"""The public entry point: ``lumos_core.open(path) -> Job``, and what a job does.

A :class:`Job` holds the loaded traces (``job.data``: one RankTrace per rank) and builds what its
methods share once, when first needed: the execution graph, the baseline configuration inferred
from the trace, and an :class:`~lumos_core.whatif.estimate.Estimator` (the traced configuration
replayed once for every estimate, sweep and validation of this job). Long steps take a
``progress`` callback, as everywhere in Lumos: ``progress(fraction, message)``; raising
:class:`~lumos_core.errors.Cancelled` from it stops the work.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lumos_core.api.results import (
    DiffReport,
    EstimateReport,
    IdleBreakdown,
    ReplayReport,
    SweepTable,
    ValidationReport,
)
from lumos_core.api.steps import keep_iteration, sample_label
from lumos_core.api.timing import timed_replay
from lumos_core.graph.build import build_graph
from lumos_core.perf.profile import HardwareProfile
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.replay.peer_waits import with_peer_waits
from lumos_core.replay.run import parse_scale, replay
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Job as TracedJob
from lumos_core.whatif.knobs import coerce_changes

if TYPE_CHECKING:  # the what-if engine is imported when first used (lumos replay does without it)
    from lumos_core.graph.model import ExecutionGraph
    from lumos_core.sweep.results import ResultsFile
    from lumos_core.whatif.config import Baseline, JobConfig
    from lumos_core.whatif.estimate import Estimator


def open(
    path: str | Path,
    *,
    strict: bool = False,
    cache: bool = True,
    workers: int | None = None,
    baseline: dict[str, Any] | None = None,
    profile: str | Path | HardwareProfile | None = None,
    keep_stalls: bool = False,
    keep_peer_waits: bool = True,
    progress: Progress = no_progress,
) -> Job:
    """Load the traces of one job: a folder of per-rank Kineto files (``*.json``, ``*.json.gz``)
    or one file. ``strict``: fail on the first bad file (else skip it and say so in
    ``job.data.skipped``); ``cache``: reuse parsed columns; ``workers``: parsing processes;
    ``baseline``: values the trace does not record (``{"layers": 12}``, as ``--baseline-layers``);
    ``profile``: a hardware profile fitted by ``lumos calibrate`` (path or object);
    ``keep_stalls``: replay GPU delays no dependency explains as fixed waits;
    ``keep_peer_waits``: collectives whose peers are not loaded keep their measured waits."""
    data = load_job(path, progress=progress, strict=strict, use_cache=cache, workers=workers)
    return Job(
        data, baseline=baseline, profile=profile, keep_stalls=keep_stalls, keep_peer_waits=keep_peer_waits
    )


class Job:
    """One traced job (see the module docstring). Made by :func:`open`, or from loaded traces."""

    def __init__(
        self,
        data: TracedJob,
        *,
        baseline: dict[str, Any] | None = None,
        profile: str | Path | HardwareProfile | None = None,
        keep_stalls: bool = False,
        keep_peer_waits: bool = True,
    ) -> None:
        self.data = data
        self.keep_peer_waits = keep_peer_waits
        self.overrides = coerce_changes(baseline or {})
        self.profile = HardwareProfile.load(Path(profile)) if isinstance(profile, (str, Path)) else profile
        self.keep_stalls = keep_stalls

    def __repr__(self) -> str:
        return f"<lumos Job {self.data.path!r}: {len(self.data.ranks)} ranks, {self.config.label()}>"

    @property
    def path(self) -> str:
        return self.data.path

    @cached_property
    def graph(self) -> ExecutionGraph:
        """The execution graph (built on first use, or by :meth:`build_graph`)."""
        return self.build_graph()

    def build_graph(self, progress: Progress = no_progress) -> ExecutionGraph:
        """:attr:`graph`, built now if it was not (with ``progress``); the waits of collectives
        whose peers are not loaded are kept or dropped as the job was opened (:attr:`peer_waits`)."""
        if "graph" not in self.__dict__:
            graph = build_graph(self.data, progress=progress, absorb_unexplained=self.keep_stalls)
            self.graph, self.peer_waits = with_peer_waits(graph, self.keep_peer_waits)
        return self.graph

    @cached_property
    def baseline(self) -> Baseline:
        """The configuration the trace was recorded with, field by field with how it was found."""
        from lumos_core.whatif.baseline import infer_baseline

        return infer_baseline(self.data, self.overrides)

    @property
    def config(self) -> JobConfig:
        return self.baseline.config

    @cached_property
    def estimator(self) -> Estimator:
        """This job's estimator: the traced configuration replayed once for every estimate."""
        from lumos_core.whatif.estimate import Estimator

        return Estimator(self.data, baseline=self.baseline, graph=self.graph, profile=self.profile)

    # ---- replay
    def replay(
        self,
        *,
        scale: dict[str, float] | list[str] | None = None,
        iteration: int | None = None,
        holdout: bool | None = None,
        holdout_cpu: str = "measured",
        idle: bool = False,
        busy: bool = False,
        progress: Progress = no_progress,
    ) -> ReplayReport:
        """Replay the graph and compare with the measured iterations (``lumos replay``). ``scale``:
        ``{"nccl": 2.0}`` (or ``["nccl=2"]``) multiplies matching tasks; ``iteration``: keep only
        ProfilerStep#N; ``holdout``: the hold-out accuracy (None: on up to a million tasks; computed
        when first read); ``idle``: attribute idle time; ``busy``: GPU busy per 1 ms in ``to_dict``."""
        factors = parse_scale(scale) if isinstance(scale, list) else dict(scale or {})
        graph = self.build_graph(scaled(progress, 0.0, 0.5))
        result, times = timed_replay(self.data, graph, factors, scaled(progress, 0.5, 1.0))
        peers = self.peer_waits
        other_pct = None
        if peers.collectives:  # the figure the other way too (one more simulation pass)
            other = build_graph(self.data, absorb_unexplained=self.keep_stalls)
            other = with_peer_waits(other, not peers.kept)[0]
            other_pct = replay(self.data, scale=factors, graph=other, critical_paths=False).mean_abs_error_pct
        if iteration is not None:
            keep_iteration(result, iteration)
        return ReplayReport(
            result,
            synthetic=self.data.is_synthetic,
            stalls_kept=self.keep_stalls,
            busy=busy,
            holdout_wanted=holdout,
            holdout_cpu=holdout_cpu,
            idle=self.idle().result if idle else None,
            peer_waits=peers,
            peer_note=peers.note(other_pct, result.mean_abs_error_pct),
            other_way_error_pct=other_pct,
            traced=self.data,
            times=times,
        )

    def idle(self) -> IdleBreakdown:
        """Every GPU stream's idle time per iteration, by cause (``lumos_core.replay.idle.CAUSES``: host,
        sync, queued, event, peer, peer not loaded, before the window, unexplained)."""
        from lumos_core.replay.idle import idle_attribution

        return IdleBreakdown(idle_attribution(self.graph))

    # ---- what-if
    def estimate(self, *, progress: Progress = no_progress, **knobs: Any) -> EstimateReport:
        """Predict this job with ``knobs`` changed (``job.estimate(dp=16)``, ``gpu="H200"``; values as
        text are read as the CLI reads them); knobs left out keep the traced value."""
        from lumos_core.whatif.config import check

        config = self.config.with_changes(**coerce_changes(knobs))
        check(config, self.baseline)
        result = self.estimator.estimate(config, progress=progress)
        return EstimateReport(
            result, synthetic=self.data.is_synthetic, stalls_kept=self.keep_stalls, source=self.data.path
        )

    def sweep(
        self,
        grid: str,
        *,
        fixed: dict[str, Any] | None = None,
        jobs: int | None = None,
        engine: str | None = None,
        address: str | None = None,
        out: str | Path | None = None,
        restart: bool = False,
        on_results: Callable[[ResultsFile], None] | None = None,
        progress: Progress = no_progress,
    ) -> SweepTable:
        """Estimate every configuration of ``grid`` (``"dp=8,16,32 pp=1,2"``, as ``lumos sweep``),
        ``fixed`` knobs held. ``engine``: "local" (``jobs`` worker processes, default one per
        core) or "ray" (a Ray cluster at ``address``, default a local Ray); None: ``jobs`` None
        estimates in this process with the job's estimator, a number runs that many worker
        processes. ``out``: a resumable results CSV; ``on_results`` sees it once opened (the rows
        already there, or how many are on disk when the sweep is interrupted)."""
        from lumos_core.sweep.engines import InProcessEngine, SweepContext, make_engine
        from lumos_core.sweep.grid import parse_grid
        from lumos_core.sweep.results import ResultsFile
        from lumos_core.sweep.run import run_grid

        g = parse_grid(grid, fixed)
        if engine is not None:
            runner = make_engine(engine, jobs, address)
        else:
            runner = InProcessEngine(progress) if jobs is None else make_engine("local", jobs)
        try:
            results = ResultsFile(Path(out), g.columns, restart=restart) if out else None
        except BaseException:
            runner.close()
            raise
        if results is not None and on_results is not None:
            on_results(results)

        def context() -> SweepContext:  # when a point is left to estimate (a resumed sweep may have none)
            made = SweepContext(self.data, self.graph, self.baseline, self.profile)
            made.kept = self.estimator  # in this process: the job's own, its replay already done
            return made

        try:
            report = run_grid(
                self.data, g, runner, baseline=self.baseline, results=results, progress=progress,
                profile=self.profile, context=context,
            )  # fmt: skip
        finally:
            runner.close()
            if results is not None:
                results.close()
        return SweepTable(report, out=str(out) if out else None)

    # ---- two jobs
    def diff(self, other: Job) -> DiffReport:
        """What changed from this job to ``other`` (``lumos diff``): iteration, breakdown, kernels,
        collectives, CPU operators, the knobs that differ."""
        from lumos_core.compare.diff import diff_jobs

        return DiffReport(diff_jobs(self.data, other.data, self.overrides, other.overrides))

    def validate(
        self, other: Job, *, force: bool = False, progress: Progress = no_progress
    ) -> ValidationReport:
        """Predict measured job ``other`` from this one (the knobs that differ become the what-if)
        and compare (``lumos validate``), beside the null model "other takes as long as this"."""
        from lumos_core.compare.validate import validate_jobs

        v = validate_jobs(
            self.data, other.data, overrides_a=self.overrides, overrides_b=other.overrides, force=force,
            progress=progress, profile=self.profile, estimator=self.estimator,
        )  # fmt: skip
        synthetic = self.data.is_synthetic or other.data.is_synthetic
        return ValidationReport(v, sample_label(self.profile, other.path), synthetic=synthetic)
