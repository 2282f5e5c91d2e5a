"""``lumos replay``: rebuild the measured iterations from the execution graph and compare.

:func:`replay` builds the graph of a loaded job, simulates it (optionally with tasks slowed down or
sped up, Daydream-style) and returns a :class:`ReplayResult`: the predicted timeline in the same
columnar shape as the loaded trace (so it can be drawn and exported like a measured one), the
measured and replayed iteration times with their breakdowns, GPU busy time per 1 ms, and the
critical path of each iteration.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core import jit
from lumos_core.errors import ConfigError, GraphError
from lumos_core.graph.build import build_graph
from lumos_core.graph.model import EdgeKind, ExecutionGraph, NodeType
from lumos_core.os_memory import release_free_heap
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.rank_threads import map_in_order
from lumos_core.replay.breakdown import (
    ITERATION_DEFINITION,
    Breakdown,
    Window,
    activity_events,
    activity_unions,
    gpu_activity,
    iteration_windows,
    window_breakdowns,
    window_length,
)
from lumos_core.replay.intervals import coverage, union
from lumos_core.replay.kernels import CAT_COMM, CAT_COMPUTE, CAT_CPU, CAT_LAG, CAT_SYNC_WAIT, critical_walk
from lumos_core.replay.outcome import Outcome, outcome_from
from lumos_core.replay.simulate import simulate
from lumos_core.replay.timeline import predicted_rank
from lumos_core.trace.model import Job, Kind, RankTrace


@dataclass
class IterationResult:
    name: str
    measured: Window
    replayed: Window
    measured_breakdown: Breakdown
    replayed_breakdown: Breakdown
    # Of the exposed compute, the time only memory copies and sets ran (no kernel, no collective):
    # their own slice, as HTA and the TensorBoard plugin report them apart.
    measured_memory_ns: int = 0
    replayed_memory_ns: int = 0

    @property
    def error_pct(self) -> float:
        m = self.measured.length
        return 100.0 * (self.replayed.length - m) / m if m else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured_us": self.measured.length / 1000,
            "replayed_us": self.replayed.length / 1000,
            "error_pct": round(self.error_pct, 4),
            "measured_start_us": self.measured.start / 1000,
            "replayed_start_us": self.replayed.start / 1000,
            "breakdown": {
                "measured": {**self.measured_breakdown.as_us(), "memory_only_us": self.measured_memory_ns / 1000},
                "replayed": {**self.replayed_breakdown.as_us(), "memory_only_us": self.replayed_memory_ns / 1000},
            },
        }


@dataclass
class CriticalPath:
    """The chain of tasks and dependencies that sets an iteration's end."""

    nodes: np.ndarray  # node ids, first to last
    length_ns: int
    by_category_ns: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks": len(self.nodes),
            "length_us": self.length_ns / 1000,
            "by_category_us": {k: v / 1000 for k, v in sorted(self.by_category_ns.items())},
        }


@dataclass
class RankResult:
    rank: int
    iterations: list[IterationResult]
    busy_measured: np.ndarray  # GPU busy fraction per 1 ms bin, over the iterations' span
    busy_replayed: np.ndarray
    critical_paths: dict[str, CriticalPath] = field(default_factory=dict)


@dataclass
class ReplayResult:
    graph: ExecutionGraph
    start: np.ndarray  # per graph node
    end: np.ndarray
    timeline: list[RankTrace]  # predicted, one per rank, same columns as the loaded ranks
    ranks: list[RankResult]
    scale: dict[str, float] = field(default_factory=dict)
    measured: Outcome = field(default_factory=lambda: Outcome(None, 0.0, Breakdown(0, 0, 0, 0)))
    replayed: Outcome = field(default_factory=lambda: Outcome(None, 0.0, Breakdown(0, 0, 0, 0)))

    @property
    def mean_abs_error_pct(self) -> float:
        errs = [abs(it.error_pct) for r in self.ranks for it in r.iterations]
        return float(np.mean(errs)) if errs else 0.0

    def gpu_start_error_us(self) -> dict[str, float] | None:
        """How far replayed GPU tasks start from where they were measured (µs): the fidelity of the
        dependencies, beyond the iteration times (which the CPU timeline largely sets). None for a
        job without GPU tasks (a CPU-only trace), as the hold-out figures are: not a perfect 0."""
        g = self.graph
        gpu = np.flatnonzero(g.node_type == NodeType.GPU)
        disp = np.where(g.arrive_of[gpu] >= 0, g.arrive_of[gpu], gpu)
        err = np.abs(self.start[disp] - g.measured_start[disp]) / 1000
        if len(err) == 0:
            return None
        return {
            "median": round(float(np.median(err)), 3),
            "p95": round(float(np.percentile(err, 95)), 3),
            "max": round(float(err.max()), 3),
        }

    def as_dict(self, include_busy: bool = False) -> dict[str, Any]:
        ranks = []
        for r in self.ranks:
            d: dict[str, Any] = {
                "rank": r.rank,
                "iterations": [it.as_dict() for it in r.iterations],
                "critical_path": {k: v.as_dict() for k, v in r.critical_paths.items()},
            }
            if include_busy:
                d["gpu_busy_1ms"] = {
                    "measured": np.round(r.busy_measured, 4).tolist(),
                    "replayed": np.round(r.busy_replayed, 4).tolist(),
                }
            ranks.append(d)
        return {
            "definition": ITERATION_DEFINITION,
            "tasks": self.graph.n_tasks,
            "edges": self.graph.edge_counts(),
            "mean_abs_error_pct": round(self.mean_abs_error_pct, 4),
            "measured": self.measured.as_dict(),  # iteration time and breakdown of the run
            "replayed": self.replayed.as_dict(),
            "unexplained_delay_us": self.graph.unexplained_ns / 1000,
            "gpu_start_error_us": self.gpu_start_error_us(),
            "scale": self.scale,
            "notes": self.graph.notes,
            "ranks": ranks,
        }


def parse_scale(items: list[str] | None) -> dict[str, float]:
    """``["nccl.*=2", "gemm=0.5"]`` -> {"nccl.*": 2.0, "gemm": 0.5} (validated)."""
    out: dict[str, float] = {}
    for item in items or []:
        pattern, sep, factor = item.rpartition("=")
        if not sep or not pattern:
            raise ConfigError(f"--scale {item!r}: expected PATTERN=FACTOR, e.g. --scale 'nccl=2'")
        try:
            f = float(factor)
            re.compile(pattern)
        except ValueError:
            raise ConfigError(f"--scale {item!r}: {factor!r} is not a number") from None
        except re.error as exc:
            raise ConfigError(f"--scale {item!r}: bad regular expression ({exc})") from None
        if not f >= 0:
            raise ConfigError(f"--scale {item!r}: the factor must be >= 0")
        out[pattern] = f
    return out


def scaled_durations(graph: ExecutionGraph, scale: dict[str, float]) -> tuple[np.ndarray, dict[str, int]]:
    """Node durations with every task whose name matches a pattern multiplied by its factor."""
    dur = graph.dur.copy()
    counts: dict[str, int] = {}
    if not scale:
        return dur, counts
    by_rank = {t.rank: t for t in graph.job.ranks}
    for pattern, factor in scale.items():
        rx = re.compile(pattern)
        hit_total = 0
        for r, t in by_rank.items():
            names = t.names_matching(rx.search)
            nodes = np.flatnonzero(
                (graph.rank == r) & (graph.event >= 0) & (graph.node_type != NodeType.ARRIVE)
            )
            ev = graph.event[nodes]
            hit = nodes[names[t.name[ev]]]
            dur[hit] = np.rint(dur[hit] * factor).astype(np.int64)
            hit_total += len(hit)
        counts[pattern] = hit_total
    return dur, counts


def replay(
    job: Job,
    *,
    scale: dict[str, float] | None = None,
    progress: Progress = no_progress,
    graph: ExecutionGraph | None = None,
    critical_paths: bool = True,
) -> ReplayResult:
    """Replay ``job`` (all ranks together) and compare with what was measured: the graph (built
    when not given), :func:`simulation_durations`, the simulation, then :func:`compare_replay`. A
    caller that wants the time of each step (``lumos replay`` prints them) calls them itself."""
    if graph is None:
        graph = build_graph(job, progress=scaled(progress, 0.0, 0.5))
    start, end = simulate(graph, simulation_durations(graph, scale, progress))
    return compare_replay(
        job, graph, start, end, scale=scale, progress=progress, critical_paths=critical_paths
    )


def simulation_durations(
    graph: ExecutionGraph, scale: dict[str, float] | None = None, progress: Progress = no_progress
) -> np.ndarray | None:
    """The node durations to simulate: the graph's own (None: not copied), or with the tasks that
    match ``scale`` slowed down or sped up."""
    # Building the graph freed its temporaries only when it returned: give that heap back to the
    # system before the replay allocates its own arrays on top of it (a third of the resident set
    # at hundreds of ranks).
    release_free_heap()
    dur = scaled_durations(graph, scale)[0] if scale else None
    progress(0.55, f"simulating {graph.n_nodes} tasks")
    return dur


def compare_replay(
    job: Job,
    graph: ExecutionGraph,
    start: np.ndarray,
    end: np.ndarray,
    *,
    scale: dict[str, float] | None = None,
    progress: Progress = no_progress,
    critical_paths: bool = True,
) -> ReplayResult:
    """The simulated times (``start``, ``end`` per node) as a predicted timeline per rank, compared with
    the measured one (iterations, breakdowns, GPU busy time, critical paths)."""
    progress(0.8, "building the predicted timeline")
    timeline: list[RankTrace] = []
    compared: list[_Compared] = []
    release = job.pages_worth_releasing()

    def one(t: RankTrace) -> tuple[RankTrace, _Compared]:  # on a worker thread: reads only
        predicted = predicted_rank(graph, t, start, end)
        against = _compare(t, predicted)
        if release:
            t.release_pages()  # read again from the cache if used: see build_graph
        return predicted, against

    with closing(map_in_order(one, job.ranks)) as done:  # in rank order, as one thread makes them
        for predicted, c in done:
            timeline.append(predicted)
            compared.append(c)
    ranks = [c.result for c in compared]
    if critical_paths:
        _add_critical_paths(graph, start, end, [(c.result, c.replayed) for c in compared])
    release_free_heap()  # the per-rank temporaries of the comparison and the walks
    progress(1.0, "replay done")
    return ReplayResult(
        graph=graph,
        start=start,
        end=end,
        timeline=timeline,
        ranks=ranks,
        scale=dict(scale or {}),
        measured=outcome_from(None, [c.steady(measured=True) for c in compared]),
        replayed=outcome_from(None, [c.steady(measured=False) for c in compared]),
    )


@dataclass
class _Compared:
    """One rank's measured and replayed iteration windows with the breakdown of every window."""

    result: RankResult
    measured: list[Window]
    replayed: list[Window]
    measured_breakdowns: list[Breakdown]
    replayed_breakdowns: list[Breakdown]

    def steady(self, measured: bool) -> tuple[int, list[Window], list[Breakdown]]:
        """(rank, steady-state windows, their breakdowns), as ``outcome_from`` takes them."""
        windows = self.measured if measured else self.replayed
        bds = self.measured_breakdowns if measured else self.replayed_breakdowns
        steady = windows[:-1] if len(windows) > 1 else windows  # breakdown.steady_windows
        return self.result.rank, steady, bds[: len(steady)]


def _compare(measured: RankTrace, predicted: RankTrace) -> _Compared:
    """Iterations, breakdowns and GPU busy time of a rank, measured and replayed. The replayed rank
    has the measured one's events (new times only), so what depends on the events alone (which are
    GPU work, which count in the breakdown) is found once for both."""
    gpu = gpu_activity(measured)
    has_gpu = bool(gpu.any())
    act, comm = activity_events(measured, gpu)
    memory = np.isin(measured.kind[act], (Kind.MEMCPY, Kind.MEMSET)) & ~comm
    out = []
    for t in (measured, predicted):
        windows = iteration_windows(t, gpu)
        start = np.asarray(t.start)[act]
        end = start + np.asarray(t.dur)[act]
        unions = activity_unions(start, end, comm)
        not_memory = union(start[~memory], end[~memory])
        memory_only = [
            window_length(*unions.both, w.start, w.end) - window_length(*not_memory, w.start, w.end)
            for w in windows
        ]
        lo = min(w.start for w in windows) if windows else 0
        hi = max(w.end for w in windows) if windows else 0
        # GPU busy time: the union of all GPU work, which is the breakdown's activity on a rank
        # with GPU work (and nothing on a CPU-only one)
        busy_s, busy_e = unions.both if has_gpu else (act[:0], act[:0])
        busy = coverage(busy_s, busy_e, lo, max(hi, lo + 1), 1_000_000)
        out.append((windows, window_breakdowns(unions, windows), busy, memory_only))
    (mw, m_bd, busy_m, m_mem), (pw, p_bd, busy_p, p_mem) = out
    iterations = [
        IterationResult(a.name, a, b, m_bd[i], p_bd[i], m_mem[i], p_mem[i])
        for i, (a, b) in enumerate(zip(mw, pw))
    ]
    return _Compared(RankResult(measured.rank, iterations, busy_m, busy_p), mw, pw, m_bd, p_bd)


def _add_critical_paths(
    graph: ExecutionGraph,
    start: np.ndarray,
    end: np.ndarray,
    ranks: list[tuple[RankResult, list[Window]]],
) -> None:
    """Every rank's and iteration's critical path (``ranks``: each rank's result and replayed
    iteration windows). The compiled walk releases the GIL, so the walks (long at hundreds of
    ranks: each crosses the whole job through its collectives) share the cores."""
    ctx = PathContext(graph)
    # Iteration by iteration: the walks of one iteration share most of their path (they meet in the
    # collectives), so walking them in a row finds those nodes still in the CPU caches.
    most = max((len(ws) for _, ws in ranks), default=0)
    work = [(res, ws[i]) for i in range(most) for res, ws in ranks if i < len(ws)]

    def walk(item: tuple[RankResult, Window]) -> CriticalPath:
        return critical_path(graph, start, end, item[0].rank, item[1], context=ctx)

    workers = max(1, min(len(work), os.cpu_count() or 1)) if jit.ENABLED else 1
    if workers == 1:
        found = [walk(item) for item in work]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lumos-critical-path") as pool:
            found = list(pool.map(walk, work))
    for (res, w), path in zip(work, found):
        res.critical_paths[w.name] = path


_SLOT_NAMES = {CAT_CPU: "cpu", CAT_COMM: "gpu_communication", CAT_COMPUTE: "gpu_compute"}
_SLOT_NAMES[CAT_SYNC_WAIT] = "waiting (sync)"
_SLOT_NAMES.update({CAT_LAG + k: f"lag: {k.name.lower()}" for k in EdgeKind})


class PathContext:
    """What every critical-path walk of one replay shares: each node's category and each rank's
    tasks (found once, instead of scanning every node of the job per rank and iteration)."""

    def __init__(self, graph: ExecutionGraph) -> None:
        self.categories = node_categories(graph)
        # the walks end on CPU or GPU tasks: each rank's, ascending, laid out rank after rank by a
        # counting sort in chunks (no full-length rank column, permutation or int64 temporaries at
        # tens of millions of nodes)
        index = np.int32 if graph.n_nodes < 2**31 else np.int64
        is_task = graph.node_type <= NodeType.GPU
        n_ranks = int(graph.rank.max()) + 1 if graph.n_nodes else 0
        counts = np.zeros(n_ranks, np.int64)
        for lo in range(0, graph.n_nodes, _CHUNK):
            counts += np.bincount(graph.rank[lo : lo + _CHUNK][is_task[lo : lo + _CHUNK]], minlength=n_ranks)
        first = np.zeros(n_ranks + 1, np.int64)
        np.cumsum(counts, out=first[1:])
        cursor = first[:-1].copy()
        tasks = np.empty(int(first[-1]), index)
        for lo in range(0, graph.n_nodes, _CHUNK):
            found = np.flatnonzero(is_task[lo : lo + _CHUNK])
            ranks = graph.rank[lo : lo + _CHUNK][found]
            by_rank = np.argsort(ranks, kind="stable")  # node ids stay ascending within a rank
            found, ranks = found[by_rank], ranks[by_rank]
            cut = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
            for a, b in zip([0, *cut.tolist()], [*cut.tolist(), len(ranks)]):
                if b > a:
                    r = int(ranks[a])
                    tasks[cursor[r] : cursor[r] + (b - a)] = found[a:b] + lo
                    cursor[r] += b - a
        self._tasks = tasks
        self._bounds = {r: (int(first[r]), int(first[r + 1])) for r in np.flatnonzero(counts).tolist()}

    def nodes_of(self, rank: int) -> np.ndarray:
        """The rank's CPU and GPU task nodes, ascending."""
        a, b = self._bounds.get(rank, (0, 0))
        return self._tasks[a:b]


def node_categories(graph: ExecutionGraph) -> np.ndarray:
    """Per node, what its time counts as on a critical path (the slots of ``replay.kernels``):
    cpu for CPU tasks; communication for collective transfers and arrivals and any event that is a
    collective kernel of its rank; compute for other GPU work."""
    cat = np.full(graph.n_nodes, CAT_COMPUTE, np.int8)
    first: dict[int, RankTrace] = {}
    for t in graph.job.ranks:
        first.setdefault(t.rank, t)
    ids = np.asarray(sorted(first), np.int64)
    offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum([len(first[r]) for r in ids.tolist()], out=offsets[1:])
    is_comm = np.zeros(int(offsets[-1]), bool)
    for i, r in enumerate(ids.tolist()):
        ev = first[r].collectives.event.astype(np.int64)
        ev = ev[(ev >= 0) & (ev < len(first[r]))]
        is_comm[offsets[i] + ev] = True
    # In chunks (_CHUNK): the lookups' temporaries stay small at tens of millions of nodes.
    for lo in range(0, graph.n_nodes, _CHUNK):
        sl = slice(lo, lo + _CHUNK)
        event = graph.event[sl]
        rank = graph.rank[sl].astype(np.int64)
        k = np.minimum(np.searchsorted(ids, rank), max(len(ids) - 1, 0))
        known = np.flatnonzero((event >= 0) & (ids[k] == rank)) if len(ids) else np.zeros(0, np.int64)
        comm = np.zeros(len(event), bool)
        comm[known] = is_comm[offsets[k[known]] + event[known]]
        part = cat[sl]
        part[comm | (graph.arrive_of[sl] >= 0)] = CAT_COMM
        part[graph.node_type[sl] == NodeType.CPU] = CAT_CPU
    return cat


# A quarter of a million nodes at a time: the lookups' int64 temporaries stay ~10 MB (a million made
# them the replay's peak at hundreds of ranks).
_CHUNK = 1 << 18


def critical_path(
    graph: ExecutionGraph,
    start: np.ndarray,
    end: np.ndarray,
    rank: int,
    window: Window,
    *,
    context: PathContext | None = None,
) -> CriticalPath:
    """Walk back from the last task of ``rank`` that ends in ``window`` along the dependencies that
    set each start (or a blocking call's end), until the window's start. Time on the path is split
    into task time by category and dependency lags by edge kind.

    Runs the compiled walk (:func:`replay.kernels.critical_walk`; tests/kernel_references.py walks
    the same path one node at a time, for the tests)."""
    ctx = context or PathContext(graph)
    nodes = ctx.nodes_of(rank)
    e = end[nodes]
    mine = nodes[(graph.node_type[nodes] <= NodeType.GPU) & (e <= window.end) & (e > window.start)]
    if len(mine) == 0:
        return CriticalPath(np.zeros(0, np.int64), 0, {})
    v = int(mine[np.argmax(end[mine])])
    g = graph
    walk, sums, seen = critical_walk(
        v, window.start, start, end, g.anchor, g.dur, g.node_type, ctx.categories,
        g.sp_ptr, g.sp_src, g.sp_from_end, g.sp_lag, g.sp_kind,
        g.ep_ptr, g.ep_src, g.ep_from_end, g.ep_lag, len(_SLOT_NAMES), 1_000_000,
    )  # fmt: skip
    cats = {_SLOT_NAMES[s]: int(sums[s]) for s in np.argsort(seen).tolist() if seen[s] >= 0}
    length = int(end[v]) - max(int(start[walk[-1]]), window.start)
    return CriticalPath(walk[::-1].copy(), length, cats)


def check_replayable(job: Job) -> None:
    """Clear errors for jobs that cannot be replayed at all."""
    if not any(len(t) for t in job.ranks):
        raise GraphError(f"{job.path}: the traces contain no events")
