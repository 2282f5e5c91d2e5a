"""Everything the window shows about one job, prepared off the GUI thread in two steps.

:func:`prepare_lanes` is what the loading worker runs first: the core loader, the per-rank drawing
tables, the overview index and what decides the first picture (iteration windows, the inferred
configuration that groups the ranks, the stragglers that represent their groups). The window shows
the lanes as soon as that is ready; :func:`summarise_job` then computes the summary tables
(iteration breakdowns, top kernels, collectives, clocks, operators, GPU idle time) on a worker while the user looks at them,
and the window hands them over with :meth:`LoadedJob.apply`. :func:`prepare_job` does both in one go
(for callers that want everything at once). The GUI thread only hands ready arrays to the widgets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from app.settings import cache_config
from app.view_model.overview_data import RankActivity, job_activity
from app.view_model.row_tables import RowTables, row_shape
from lumos_core.api.knobs import Baseline, infer_baseline
from lumos_core.api.loading import build_graph, load_job, warm_up
from lumos_core.api.views import (
    ClockStat,
    CollectiveStat,
    DeviceMemory,
    IdleReport,
    IterationStat,
    KernelStat,
    OperatorStat,
    StragglerReport,
    Window,
    clock_table,
    collectives_table,
    default_role,
    event_families,
    find_stragglers,
    idle_attribution,
    iteration_table,
    iteration_windows,
    operator_table,
    rank_groups,
    rank_memory,
    top_kernels,
)
from lumos_core.errors import LumosError
from lumos_core.graph.model import ExecutionGraph
from lumos_core.progress import scaled
from lumos_core.trace.model import Job

T = TypeVar("T")


@dataclass
class LoadedJob:
    path: str
    job: Job
    families: list[np.ndarray]  # per rank, per event
    tables: RowTables  # per rank, built when first shown
    iterations: list[IterationStat]
    collectives: list[CollectiveStat]
    kernels: list[KernelStat]  # whole job, by total time
    clocks: list[ClockStat]
    load_s: float
    display_name: str = ""
    baseline: Baseline | None = None  # the configuration inferred from the trace (what-if start)
    baseline_error: str = ""  # why there is none
    memory: list[list[DeviceMemory]] | None = None  # per rank: its devices' memory records, summarised
    idle: IdleReport | None = None  # GPU idle time by cause per stream and iteration
    idle_error: str = ""  # why there is none
    graph: ExecutionGraph | None = None  # the execution graph built for it (reused by the what-ifs)
    stragglers: StragglerReport | None = None  # ranks late at their collectives or iterations
    activity: list[RankActivity] | None = None  # per rank: GPU busy time by class (the overview strip)
    operators: list[OperatorStat] | None = None  # CPU operators of all ranks, by host self time
    windows: list[list[Window]] | None = None  # per rank: its iterations' windows (timeline marks)
    summarised: bool = False  # the summaries of :func:`summarise_job` are in (else only the lanes)

    @property
    def title(self) -> str:
        name = self.display_name or Path(self.path).name or self.path
        n = len(self.job.ranks)
        return f"{name} ({n} rank{'s' * (n != 1)})" + (" [synthetic]" if self.job.is_synthetic else "")

    @property
    def n_events(self) -> int:
        """Events the timeline draws, all ranks (more than the replay's tasks, which leave out
        annotations and the operators around kernel launches)."""
        n = getattr(self.tables, "n_events", None)  # lazy tables know it unbuilt
        return n if n is not None else sum(len(t) for t in self.tables)

    def apply(self, summaries: JobSummaries) -> None:
        """Take the summaries computed by :func:`summarise_job` (on the GUI thread, so a widget never
        sees a half-filled job)."""
        self.iterations = summaries.iterations
        self.collectives = summaries.collectives
        self.kernels = summaries.kernels
        self.clocks = summaries.clocks
        self.operators = summaries.operators
        self.idle, self.idle_error, self.graph = summaries.idle, summaries.idle_error, summaries.graph
        self.summarised = True


@dataclass
class JobSummaries:
    """The summary tables of a job, computed after its lanes are shown (see the module docstring)."""

    iterations: list[IterationStat]
    collectives: list[CollectiveStat]
    kernels: list[KernelStat]
    clocks: list[ClockStat]
    operators: list[OperatorStat]
    idle: IdleReport | None
    idle_error: str
    graph: ExecutionGraph | None
    seconds: float


def prepare_job(
    path: str,
    progress: Callable[[float, str], None],
    on_file: Callable[[str, str, str], None] | None = None,
) -> LoadedJob:
    """Load ``path`` and build everything the window shows: lanes and summaries (on a worker)."""
    loaded = prepare_lanes(path, scaled(progress, 0.0, 0.9), on_file)
    loaded.apply(summarise_job(loaded, scaled(progress, 0.9, 1.0)))
    return loaded


def prepare_lanes(
    path: str,
    progress: Callable[[float, str], None],
    on_file: Callable[[str, str, str], None] | None = None,
) -> LoadedJob:
    """Load ``path`` and build what the timeline's first picture needs (runs on a worker thread)."""
    t0 = time.perf_counter()
    job = on_python_thread(
        lambda: load_job(
            path, progress=scaled(progress, 0.0, 0.85), on_file=on_file, cache_config=cache_config()
        )
    )
    return lanes_of(path, job, progress, t0)


def on_python_thread(fn: Callable[[], T]) -> T:
    """``fn()`` on a thread Python started, waited for here. The loader's parsing process pool is
    started from it: started from the Qt worker itself, the pool registers that foreign thread with
    :mod:`threading` for good (a "dummy" thread that outlives the worker; seen by the xcb smoke test
    after a 64-rank job opened)."""
    out: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:  # re-raised on the caller's thread (Cancelled included)
            out.append((False, exc))
        finally:
            done.set()

    # daemon given and no join(): both would ask threading.current_thread() on this foreign thread,
    # which is what registers it
    threading.Thread(target=run, name="lumos-load", daemon=True).start()
    done.wait()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def prepare_loaded(
    path: str, job: Job, progress: Callable[[float, str], None], t0: float | None = None
) -> LoadedJob:
    """Drawing tables and summaries of an already loaded job."""
    loaded = lanes_of(path, job, scaled(progress, 0.0, 0.9), t0)
    loaded.apply(summarise_job(loaded, scaled(progress, 0.9, 1.0)))
    return loaded


def lanes_of(
    path: str, job: Job, progress: Callable[[float, str], None], t0: float | None = None
) -> LoadedJob:
    """Drawing data of an already loaded job, and what decides how it is first shown. Row tables
    are built only for the ranks the first picture shows (:func:`first_shown`); the others are
    built when their lanes come into view (:mod:`app.view_model.row_tables`)."""
    t0 = time.perf_counter() if t0 is None else t0
    n = len(job.ranks)
    families = []
    for k, rank in enumerate(job.ranks):
        families.append(event_families(rank))
        progress(0.85 + 0.05 * (k + 1) / n, f"classified rank {rank.rank}")
    progress(0.9, "arranging the lanes")
    tables = RowTables(job.ranks, families, [row_shape(rank) for rank in job.ranks])
    progress(0.93, "finding iterations and stragglers")
    windows = [iteration_windows(rank) for rank in job.ranks]  # the marks; breakdowns come later
    stragglers = find_stragglers(job)
    activity = job_activity(job.ranks, families)
    memory = [rank_memory(rank) for rank in job.ranks]
    progress(0.96, "inferring the traced configuration")
    baseline, baseline_error = infer_job_baseline(job)
    shown = first_shown(job, baseline, stragglers)
    for k, ri in enumerate(shown):
        tables.build(ri)
        progress(0.97 + 0.03 * (k + 1) / len(shown), f"arranged rank {job.ranks[ri].rank}")
    progress(1.0, f"loaded {n} rank(s)")
    return LoadedJob(
        path=str(path),
        job=job,
        families=families,
        tables=tables,
        iterations=[],
        collectives=[],
        kernels=[],
        clocks=[],
        load_s=time.perf_counter() - t0,
        baseline=baseline,
        baseline_error=baseline_error,
        memory=memory,
        stragglers=stragglers,
        activity=activity,
        windows=windows,
    )


AUTO_GROUP_RANKS = 32  # from this many ranks a job opens grouped (one representative per group)
FIRST_SHOWN_RANKS = 16  # ungrouped: the ranks built before the first paint (a screenful and more)


def opening_grouping(n_ranks: int, baseline: Baseline | None) -> str:
    """How a job opens: big jobs grouped by pipeline stage (or TP group without a pipeline)."""
    return default_role(baseline) if n_ranks >= AUTO_GROUP_RANKS else ""


def first_shown(job: Job, baseline: Baseline | None, stragglers: StragglerReport | None) -> list[int]:
    """Rank indices whose lanes the first picture shows: the representatives of the groups a big
    job opens with, else the first ranks (all of a small job)."""
    n = len(job.ranks)
    by = opening_grouping(n, baseline)
    if not by:
        return list(range(min(n, FIRST_SHOWN_RANKS if n >= AUTO_GROUP_RANKS else n)))
    flagged = {r.rank for r in stragglers.flagged} if stragglers is not None else set()
    return [g.representative for g in rank_groups(baseline, [t.rank for t in job.ranks], by, flagged)]


def summarise_job(loaded: LoadedJob, progress: Callable[[float, str], None]) -> JobSummaries:
    """The summary tables of a job whose lanes are shown (runs on a worker thread; reads the job,
    changes nothing: hand the result over with :meth:`LoadedJob.apply`)."""
    t0 = time.perf_counter()
    job = loaded.job
    progress(0.0, "summarising iterations")
    iterations = iteration_table(job)
    progress(0.1, "summarising collectives")
    collectives = collectives_table(job)
    progress(0.3, "summarising kernels and operators")
    kernels = top_kernels(job, None, limit=None)
    clocks = clock_table(job)
    operators = operator_table(job, None)
    # the idle table's graph build is the job's first: compile (or load) the kernels here, and say so
    warm_up(scaled(progress, 0.6, 0.7))
    progress(0.7, "attributing GPU idle time")
    idle, idle_error, graph = job_idle(job)
    progress(1.0, "summaries ready")
    return JobSummaries(
        iterations=iterations,
        collectives=collectives,
        kernels=kernels,
        clocks=clocks,
        operators=operators,
        idle=idle,
        idle_error=idle_error,
        graph=graph,
        seconds=time.perf_counter() - t0,
    )


IDLE_LIMIT_EVENTS = 2_000_000  # above this the idle table would cost a whole graph build at load


def job_idle(job: Job) -> tuple[IdleReport | None, str, ExecutionGraph | None]:
    """GPU idle time by cause (and the graph it came from), or why it is not shown."""
    n = sum(len(t) for t in job.ranks)
    if n > IDLE_LIMIT_EVENTS:
        return (
            None,
            f"not computed at load for jobs over {IDLE_LIMIT_EVENTS:,} events: use lumos replay --idle",
            None,
        )
    if not any(ln.is_gpu for t in job.ranks for ln in t.lanes):
        return None, "no GPU streams in this trace", None
    try:
        graph = build_graph(job)
        return idle_attribution(graph), "", graph
    except LumosError as exc:
        return None, str(exc), None


def infer_job_baseline(job: Job, overrides: dict | None = None) -> tuple[Baseline | None, str]:
    """The baseline for the what-if panel, or None and why. Never fails the load: a job whose
    configuration cannot be inferred still opens as a timeline."""
    try:
        return infer_baseline(job, overrides), ""
    except Exception as exc:  # a trace the inference does not understand must still open
        return None, f"the traced configuration could not be inferred: {type(exc).__name__}: {exc}"
