"""Accuracy that means something: the hold-out replay and the null models, on the same iterations.

For every steady-state iteration *k* (one that runs the same program as another iteration, see
:func:`~lumos_core.replay.twins.steady_iterations`; decided per iteration as the loop reaches it, so
that only the twin maps of nearby iterations are kept), the hold-out graph of
*k* (:mod:`lumos_core.replay.holdout`) and the null models (:mod:`lumos_core.replay.null_models`)
are replayed, and compared with *k*'s measured iteration time (per rank) and GPU task starts:

* ``mean_abs_error_pct``: mean over ranks and held-out iterations of |predicted - measured| /
  measured iteration time;
* ``gpu_start_error_us``: median and 95th percentile, over every GPU task of the held-out
  iterations that has a twin in an iteration it learned from (a partial twin is held out over its
  matched tasks), of |predicted - measured| start.

The report says how many iterations were held out, what share of their tasks were matched, and why
any iteration was not held out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.progress import Progress, no_progress
from lumos_core.replay.breakdown import iteration_windows
from lumos_core.replay.holdout import holdout_graph
from lumos_core.replay.null_models import (
    NULL_MODELS,
    cpu_only,
    gpu_only,
    gpu_span_iteration,
    no_lag,
    persistence_starts,
)
from lumos_core.replay.run import predicted_rank
from lumos_core.replay.simulate import simulate
from lumos_core.replay.twins import NEIGHBOURS, STEADY_MATCH, Iterations, iterations_of, twin_share

HOLDOUT_DEFINITION = (
    "hold-out: each iteration k is replayed from a graph whose dependencies, lags and collective "
    "transfer times were learned from the other iterations only (tasks matched by their place on "
    "their thread/stream); earlier iterations keep their measured times; k's own measured task "
    "durations are used, including the CPU work between a thread's calls (with --holdout-cpu "
    "learned that CPU work is learned from the other iterations too); iterations are held out when "
    f"they run the same program as another one (steady state: {100 * STEADY_MATCH:.0f} % of their "
    "tasks have a twin), and GPU starts are scored over the tasks that have one"
)
IN_SAMPLE_DEFINITION = (
    "in-sample: the graph is calibrated on every iteration, the ones it replays included (close to "
    "exact by construction)"
)


@dataclass
class Score:
    """One model's errors over the held-out iterations."""

    iteration_errors_pct: list[float] = field(default_factory=list)  # signed, per (rank, iteration)
    gpu_start_errors_ns: list[np.ndarray] = field(default_factory=list)

    @property
    def mean_abs_error_pct(self) -> float | None:
        if not self.iteration_errors_pct:
            return None
        return float(np.mean(np.abs(self.iteration_errors_pct)))

    def gpu_start_error_us(self) -> dict[str, float] | None:
        err = np.concatenate(self.gpu_start_errors_ns) if self.gpu_start_errors_ns else np.zeros(0)
        if len(err) == 0:
            return None
        return {
            "median": round(float(np.median(err)) / 1000, 3),
            "p95": round(float(np.percentile(err, 95)) / 1000, 3),
        }

    def as_dict(self) -> dict[str, Any]:
        m = self.mean_abs_error_pct
        return {
            "mean_abs_error_pct": None if m is None else round(m, 4),
            "gpu_start_error_us": self.gpu_start_error_us(),
        }


@dataclass
class HoldoutReport:
    available: bool
    reason: str | None
    iterations: list[str]
    lumos: Score
    null_models: dict[str, Score]
    untwinned_tasks: int = 0
    tasks: int = 0
    dropped_dependencies: int = 0
    not_steady: list[str] = field(default_factory=list)  # iterations not held out (see steady_iterations)
    cpu_work: str = "measured"
    share: dict[str, float] = field(default_factory=dict)  # per iteration: best share of twinned tasks

    @property
    def matched_pct(self) -> float | None:
        return 100.0 * (1 - self.untwinned_tasks / self.tasks) if self.tasks else None

    def not_held_out(self) -> list[dict[str, Any]]:
        """Each iteration not held out, with why."""
        return [
            {
                "iteration": name,
                "matched_pct": round(100 * self.share.get(name, 0.0), 1),
                "reason": f"under {100 * STEADY_MATCH:.0f} % of its tasks have a twin in another "
                "iteration (a different program: warm-up, compilation, profiler start)",
            }
            for name in self.not_steady
        ]

    def holdout_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "available": self.available,
            "reason": self.reason,
            "iterations": len(self.iterations),
        }
        d.update(
            self.lumos.as_dict()
            if self.available
            else {"mean_abs_error_pct": None, "gpu_start_error_us": None}
        )
        d["held_out"] = self.iterations
        d["definition"] = HOLDOUT_DEFINITION
        d["tasks_without_twin"] = self.untwinned_tasks
        d["tasks"] = self.tasks
        d["not_steady_state"] = self.not_steady
        d["cpu_work"] = self.cpu_work
        d["held_out_count"] = len(self.iterations)
        m = self.matched_pct
        d["matched_pct"] = None if m is None else round(m, 2)
        d["steady_threshold_pct"] = round(100 * STEADY_MATCH, 1)
        d["not_held_out"] = self.not_held_out()
        return d

    def summary_line(self) -> str:
        """How many iterations were held out, over what share of their tasks, and why others not."""
        if not self.available:
            return f"hold-out: not available: {self.reason}"
        line = (
            f"hold-out: {len(self.iterations)} of {len(self.iterations) + len(self.not_steady)} "
            f"iterations held out, {self.matched_pct:.1f} % of their tasks matched to a twin "
            "(GPU starts scored over those)"
        )
        for n in self.not_held_out():
            line += f"; {n['iteration']} not held out: {n['matched_pct']:.1f} % matched, {n['reason']}"
        return line

    def null_models_dict(self) -> dict[str, Any]:
        empty = {"mean_abs_error_pct": None, "gpu_start_error_us": None}
        return {name: (self.null_models[name].as_dict() if self.available else empty) for name in NULL_MODELS}


def unavailable(reason: str) -> HoldoutReport:
    return HoldoutReport(False, reason, [], Score(), {m: Score() for m in NULL_MODELS})


def evaluate_holdout(
    graph: ExecutionGraph,
    *,
    cpu_work: str = "measured",
    null_models: bool = True,
    progress: Progress = no_progress,
) -> HoldoutReport:
    """Hold-out replay of every steady-state iteration, with the null models. ``cpu_work``: the CPU
    work between a thread's tasks is k's own (``measured``) or learned like the lags (``learned``)."""
    its = iterations_of(graph)
    if its.count == 0:
        return unavailable("the trace has no ProfilerStep#N iterations to hold out")
    if its.count == 1:
        return unavailable(
            f"the trace has one iteration ({its.names[0]}): hold-out needs at least two, one to learn "
            "from and one to predict"
        )
    lumos = Score()
    nulls = {m: Score() for m in NULL_MODELS}
    untwinned = tasks = dropped = 0
    steady: list[int] = []
    share: dict[int, float] = {}
    for k in range(its.count):
        progress(k / its.count, f"hold-out replay of {its.names[k]}")
        its.forget(k - NEIGHBOURS - 2)  # maps later iterations never use again
        share[k] = twin_share(graph, its, k)
        if share[k] < STEADY_MATCH:
            continue
        steady.append(k)
        h = holdout_graph(graph, its, k, cpu_work=cpu_work)
        untwinned += h.untwinned
        tasks += h.tasks
        dropped += h.dropped
        start, end = simulate(h.graph)
        _score_replay(lumos, h.graph, its, k, start, end, h.matched)
        if not null_models:
            continue
        for score, g in ((nulls["cpu_only"], cpu_only(h)), (nulls["no_lag"], no_lag(h))):
            start, end = simulate(g)
            _score_replay(score, g, its, k, start, end, h.matched)
        g = gpu_only(h, its)
        start, end = simulate(g)
        _score_gpu_starts(nulls["gpu_only"], graph, its, k, start, h.matched)
        for r in its.ranks_of(k):
            span = gpu_span_iteration(g, its, r, k, start, end)
            if span is not None:
                nulls["gpu_only"].iteration_errors_pct.append(_pct(span, its.windows[(r, k)].length))
        pred = persistence_starts(graph, its, h.maps, k)
        _score_gpu_starts(nulls["persistence"], graph, its, k, pred, h.matched)
        for r in its.ranks_of(k):
            others = [its.windows[(r, j)].length for j in h.learned_from if (r, j) in its.windows]
            if others:
                nulls["persistence"].iteration_errors_pct.append(
                    _pct(int(np.mean(others)), its.windows[(r, k)].length)
                )
    progress(1.0, "hold-out done")
    if not steady:
        rep = unavailable(
            f"no steady-state iteration: in every one of the {its.count} iterations more than "
            f"{100 * (1 - STEADY_MATCH):.0f} % of the tasks appear in no other iteration "
            f"(best share with a twin: {100 * max(share.values()):.1f} %)"
        )
        rep.not_steady = list(its.names)
        rep.share = {its.names[k]: v for k, v in share.items()}
        return rep
    skipped = [its.names[k] for k in range(its.count) if k not in steady]
    return HoldoutReport(
        True,
        None,
        [its.names[k] for k in steady],
        lumos,
        nulls,
        untwinned,
        tasks,
        dropped,
        skipped,
        cpu_work,
        {its.names[k]: v for k, v in share.items()},
    )


def _pct(predicted: int, measured: int) -> float:
    return 100.0 * (predicted - measured) / measured if measured else 0.0


def _gpu_nodes(graph: ExecutionGraph, its: Iterations, k: int, matched: np.ndarray) -> np.ndarray:
    """GPU tasks of iteration k with a twin, each once (a collective by its arrival, where its start
    is drawn)."""
    gpu = np.flatnonzero((graph.node_type == NodeType.GPU) & (its.region == k))
    nodes = np.where(graph.arrive_of[gpu] >= 0, graph.arrive_of[gpu], gpu)
    return nodes[matched[nodes]]


def _score_gpu_starts(
    score: Score, graph: ExecutionGraph, its: Iterations, k: int, start: np.ndarray, matched: np.ndarray
) -> None:
    nodes = _gpu_nodes(graph, its, k, matched)
    score.gpu_start_errors_ns.append(np.abs(start[nodes] - graph.measured_start[nodes]))


def _score_replay(
    score: Score,
    g: ExecutionGraph,
    its: Iterations,
    k: int,
    start: np.ndarray,
    end: np.ndarray,
    matched: np.ndarray,
) -> None:
    _score_gpu_starts(score, g, its, k, start, matched)
    name = its.names[k]
    for r in its.ranks_of(k):
        t = g.job.rank(r)
        windows = {w.name: w for w in iteration_windows(predicted_rank(g, t, start, end))}
        w = windows.get(name)
        if w is not None:
            score.iteration_errors_pct.append(_pct(w.length, its.windows[(r, k)].length))
