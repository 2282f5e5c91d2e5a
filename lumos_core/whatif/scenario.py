"""Scenarios: the numbers of one replay or estimate, in one shape, and how two of them differ.

The app keeps every run as a named scenario (the baseline replay, "DP 16", ...) and compares any
two. :func:`summarize_replay` and :func:`summarize_estimate` turn a
:class:`~lumos_core.replay.run.ReplayResult` or :class:`~lumos_core.whatif.estimate.EstimateResult` into a
:class:`ScenarioSummary`: measured, replayed and predicted :class:`~lumos_core.replay.outcome.Outcome`
(iteration time and breakdown by the estimator's definition, so a scenario's numbers are exactly
those of ``lumos estimate --json``), predicted vs measured time of every iteration of every
simulated rank, where GPU time goes per kernel and per collective kind. :func:`compare` gives the
delta table of two summaries; :func:`explain_task` says why a predicted task starts and lasts
what it does. Everything here is plain data (CSV via :func:`lumos_core.replay.summaries.write_csv`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.graph.model import EdgeKind, NodeType
from lumos_core.replay.breakdown import iteration_windows, steady_windows
from lumos_core.replay.run import ReplayResult
from lumos_core.replay.simulate import binding_end_predecessor, binding_predecessor
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, CollectiveKind, Job, RankTrace
from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.estimate import ESTIMATE_DEFINITION, EstimateResult, Outcome
from lumos_core.whatif.retime import Retiming
from lumos_core.whatif.throughput import WORK_KNOBS, Throughput, throughput_of, vocab_of

BREAKDOWN_PARTS = (
    ("exposed compute", "exposed_compute_ns"),
    ("overlapped", "overlapped_ns"),
    ("exposed communication", "exposed_comm_ns"),
    ("other", "other_ns"),
)


@dataclass
class IterationRow:
    """One iteration of one simulated rank: measured (on the traced rank it comes from) vs predicted."""

    rank: int  # rank in the predicted job
    stands_for: str  # every rank of the predicted job this simulated rank represents
    traced_rank: int  # -1: a rank the estimator built anew (measured = the job's mean)
    iteration: str
    measured_ms: float
    predicted_ms: float
    diff_pct: float  # (predicted - measured) / measured; the replay error for a replay


@dataclass
class BreakdownRow:
    """Mean iteration split (ms) of one outcome, for tables and CSV."""

    which: str  # measured, replayed, predicted
    rank: str  # "mean" or a rank number
    iteration_ms: float
    exposed_compute_ms: float
    overlapped_ms: float
    exposed_comm_ms: float
    other_ms: float


@dataclass
class DeltaRow:
    """One line of a comparison: scenario A, scenario B, B - A."""

    section: str  # iteration, breakdown, kernel, collective
    item: str
    unit: str
    a: float
    b: float
    delta: float
    delta_pct: float  # NaN when A is 0


@dataclass
class ScenarioSummary:
    """Everything the app shows and compares about one run (see the module docstring)."""

    name: str
    kind: str  # "replay" or "estimate"
    changes: dict[str, Any]  # what differs from the baseline (empty for the baseline replay)
    config: JobConfig
    world_size: int
    represents: dict[int, list[int]]  # simulated rank -> ranks of the predicted job it stands for
    traced_rank: dict[int, int]  # simulated rank -> the traced rank it was derived from
    measured: Outcome
    replayed: Outcome
    predicted: Outcome
    iterations: list[IterationRow]
    kernels_ns: dict[str, float]  # GPU time per kernel name, per rank and iteration (no collectives)
    collectives_ns: dict[str, float]  # GPU time per collective kind, per rank and iteration
    retimed: list[Retiming] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replay_error_pct: float = math.nan  # replay only: mean |error| over every iteration (as the CLI)
    seconds: float = 0.0
    estimate_json: dict[str, Any] | None = None  # estimate only: EstimateResult.as_dict()
    # A prediction of this job from another one (``lumos validate``): that job's name, and the null
    # model's error (this job's time = the other's measured time); ``replayed`` is the other's replay.
    predicted_from: str = ""
    null_error_pct: float = math.nan
    vocab: int | None = None  # the traced model's vocabulary (the LM head's FLOPs), when inferred

    @property
    def throughput(self) -> Throughput:
        """Rate per GPU and MFU of the predicted (or replayed) iteration (whatif/throughput.py)."""
        return throughput_of(self.config, self.iteration_us, self.vocab)

    @property
    def work_changed(self) -> bool:
        """Does this scenario do different work per iteration than the traced job (rank by rate)?"""
        return any(k in WORK_KNOBS for k in self.changes)

    @property
    def cpu_paced(self) -> float | None:
        """Share of the traced iteration the host sets, when it hid this GPU what-if (else None)."""
        c = (self.estimate_json or {}).get("cpu_paced")
        return None if not c else c["share_pct"] / 100

    @property
    def iteration_us(self) -> float:
        return self.predicted.iteration_us

    @property
    def change_pct(self) -> float:
        """Predicted vs the replayed baseline (as ``lumos estimate`` reports it)."""
        r = self.replayed.iteration_us
        return 100.0 * (self.predicted.iteration_us / r - 1) if r else 0.0

    @property
    def error_pct(self) -> float:
        """Predicted vs measured: the hold-out error of a prediction from another job."""
        m = self.measured.iteration_us
        return 100.0 * (self.predicted.iteration_us / m - 1) if m else math.nan

    @property
    def microbatches_per_iteration(self) -> int:
        """Microbatches the whole job processes per iteration (DP replicas x microbatches)."""
        return self.config.dp * self.config.microbatches

    def stands_for(self, rank: int) -> list[int]:
        return self.represents.get(rank, [rank])

    def breakdown_rows(self) -> list[BreakdownRow]:
        rows = [_breakdown_row("measured", "mean", self.measured)]
        if self.kind == "estimate":
            rows.append(_breakdown_row("replayed", "mean", self.replayed))
        rows.append(_breakdown_row("predicted", "mean", self.predicted))
        return rows

    def tables(self) -> dict[str, tuple[list[Any], type]]:
        """Every table of the scenario, for CSV export (name -> rows, row type)."""
        out: dict[str, tuple[list[Any], type]] = {
            "iterations": (self.iterations, IterationRow),
            "breakdown": (self.breakdown_rows(), BreakdownRow),
        }
        if self.retimed:
            out["retimed"] = (self.retimed, Retiming)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "changes": self.changes,
            "config": self.config.as_dict(),
            "world_size": self.world_size,
            "definition": ESTIMATE_DEFINITION,
            "measured": self.measured.as_dict(),
            "replayed": self.replayed.as_dict(),
            "predicted": self.predicted.as_dict(),
            "change_pct": round(self.change_pct, 3),
            "throughput": self.throughput.as_dict(),
            "replay_error_pct": None if math.isnan(self.replay_error_pct) else self.replay_error_pct,
            **(
                {
                    "predicted_from": self.predicted_from,
                    "holdout_error_pct": round(self.error_pct, 3),
                    "null_error_pct": round(self.null_error_pct, 3),
                }
                if self.predicted_from
                else {}
            ),
            "represents": {str(k): v for k, v in self.represents.items()},
            "retimed": [r.as_dict() for r in self.retimed],
            "notes": self.notes,
        }


def _breakdown_row(which: str, rank: str, o: Outcome) -> BreakdownRow:
    b = o.breakdown
    return BreakdownRow(
        which,
        rank,
        o.iteration_us / 1000,
        b.exposed_compute_ns / 1e6,
        b.overlapped_ns / 1e6,
        b.exposed_comm_ns / 1e6,
        b.other_ns / 1e6,
    )


def traced_sources(job: Job, timeline: list[RankTrace]) -> list[int]:
    """For each predicted rank, the index in ``job.ranks`` of the traced rank whose events it has
    (with new times), or -1 for a rank the estimator built anew (a rewritten pipeline or layer
    count: its own events and lanes).

    Re-timed ranks keep the traced rank's file, events and lanes, so the file (and the event count)
    identifies the source even after the rank was renumbered for the new job.
    """
    by_file = {t.file: i for i, t in enumerate(job.ranks)}
    out = []
    for p in timeline:
        i = by_file.get(p.file, -1)
        if i >= 0 and (len(job.ranks[i]) != len(p) or len(job.ranks[i].lanes) != len(p.lanes)):
            i = -1
        out.append(i)
    return out


def measured_iterations(job: Job) -> dict[str, float]:
    """Mean measured length (ns) of each iteration over the traced ranks, by name."""
    lengths: dict[str, list[int]] = {}
    for t in job.ranks:
        for w in iteration_windows(t):
            lengths.setdefault(w.name, []).append(w.length)
    return {k: float(np.mean(v)) for k, v in lengths.items()}


def summarize_replay(
    job: Job, result: ReplayResult, baseline: Baseline, name: str = "baseline replay", seconds: float = 0.0
) -> ScenarioSummary:
    """The baseline replay as a scenario (predicted = replayed); ``seconds``: how long the replay
    took, as its caller measured it."""
    config = baseline.config
    measured = dataclasses.replace(result.measured, config=config)
    replayed = dataclasses.replace(result.replayed, config=config)
    rows = []
    for t, rr in zip(job.ranks, result.ranks):
        for it in rr.iterations:
            rows.append(
                IterationRow(
                    t.rank,
                    str(t.rank),
                    t.rank,
                    it.name,
                    it.measured.length / 1e6,
                    it.replayed.length / 1e6,
                    it.error_pct,
                )
            )
    kernels, colls = gpu_time_by_name(result.timeline)
    return ScenarioSummary(
        name=name,
        kind="replay",
        changes={},
        config=config,
        world_size=len(job.ranks),
        represents={t.rank: [t.rank] for t in job.ranks},
        traced_rank={t.rank: t.rank for t in job.ranks},
        measured=measured,
        replayed=replayed,
        predicted=replayed,
        iterations=rows,
        kernels_ns=kernels,
        collectives_ns=colls,
        notes=list(result.graph.notes),
        replay_error_pct=result.mean_abs_error_pct,
        seconds=seconds,
        vocab=vocab_of(baseline),
    )


def summarize_estimate(
    job: Job, result: EstimateResult, changes: dict[str, Any], name: str | None = None
) -> ScenarioSummary:
    """An estimate as a scenario; the outcomes are the EstimateResult's own (same as the CLI)."""
    sources = traced_sources(job, result.timeline)
    traced = {p.rank: (job.ranks[i].rank if i >= 0 else -1) for p, i in zip(result.timeline, sources)}
    job_mean = measured_iterations(job)
    rows = []
    for p, i in zip(result.timeline, sources):
        # a re-timed rank against the traced rank it comes from; a rebuilt one against the
        # measured job's mean of the same iteration
        if i >= 0:
            measured = {w.name: float(w.length) for w in iteration_windows(job.ranks[i])}
        else:
            measured = job_mean
        stands = ", ".join(str(r) for r in result.represents.get(p.rank, [p.rank]))
        for w in iteration_windows(p):
            m = measured.get(w.name)
            m_ms = m / 1e6 if m is not None else math.nan
            p_ms = w.length / 1e6
            diff = 100.0 * (p_ms - m_ms) / m_ms if m else math.nan
            rows.append(IterationRow(p.rank, stands, traced[p.rank], w.name, m_ms, p_ms, diff))
    kernels, colls = gpu_time_by_name(result.timeline)
    config = result.predicted.config
    return ScenarioSummary(
        name=name or config.label(result.baseline.config),
        kind="estimate",
        changes=dict(changes),
        config=config,
        world_size=result.world_size,
        represents={k: list(v) for k, v in result.represents.items()},
        traced_rank=traced,
        measured=result.measured,
        replayed=result.replayed,
        predicted=result.predicted,
        iterations=rows,
        kernels_ns=kernels,
        collectives_ns=colls,
        retimed=list(result.retimed),
        notes=list(result.notes),
        seconds=result.seconds,
        estimate_json=result.as_dict(),
        vocab=vocab_of(result.baseline),
    )


def gpu_time_by_name(ranks: list[RankTrace]) -> tuple[dict[str, float], dict[str, float]]:
    """(kernel name -> ns, collective kind -> ns): GPU time per rank and iteration, over the
    steady-state iterations of ESTIMATE_DEFINITION (the last, partial one left out)."""
    kernels: dict[str, float] = {}
    colls: dict[str, float] = {}
    n_windows = 0
    for t in ranks:
        windows = steady_windows(t)
        if not windows or len(t) == 0:
            continue
        n_windows += len(windows)
        # GPU work belongs to the iteration that launched it (its launch call's start), as in the
        # iteration windows: by its own start, a kernel delayed past the next step would move
        # to the (left out) last iteration and look faster
        when = t.start.copy()
        has = t.launch >= 0
        when[has] = t.start[t.launch[has]]
        inside = np.zeros(len(t), bool)
        for w in windows:
            inside |= (when >= w.start) & (when < w.end)
        act = inside & np.isin(t.kind, GPU_ACTIVITY_KINDS)
        is_coll = np.zeros(len(t), bool)
        is_coll[t.collectives.event] = True
        k = np.flatnonzero(act & ~is_coll)
        if len(k):
            per_name = np.bincount(t.name[k], weights=t.dur[k].astype(np.float64), minlength=len(t.strings))
            for n in np.flatnonzero(per_name):
                key = t.strings[int(n)]
                kernels[key] = kernels.get(key, 0.0) + float(per_name[n])
        c = t.collectives
        keep = act[c.event]
        for kind, ev in zip(c.kind[keep].tolist(), c.event[keep].tolist()):
            key = CollectiveKind(kind).label
            colls[key] = colls.get(key, 0.0) + float(t.dur[ev])
    if n_windows:
        kernels = {k: v / n_windows for k, v in kernels.items()}
        colls = {k: v / n_windows for k, v in colls.items()}
    return kernels, colls


# ------------------------------------------------------------------------------------ comparison


def _delta(section: str, item: str, unit: str, a: float, b: float) -> DeltaRow:
    return DeltaRow(section, item, unit, a, b, b - a, 100.0 * (b - a) / a if a else math.nan)


def compare(a: ScenarioSummary, b: ScenarioSummary, top: int = 8) -> list[DeltaRow]:
    """What changes from scenario ``a`` to ``b``: iteration time, throughput, breakdown, the
    ``top`` kernels whose time changes most, and every collective kind (times per rank and
    iteration, ms)."""
    rows = [
        _delta("iteration", "iteration time", "ms", a.iteration_us / 1000, b.iteration_us / 1000),
        _delta("iteration", "GPUs", "", a.world_size, b.world_size),
        _delta(
            "iteration",
            "microbatches per iteration (whole job)",
            "",
            a.microbatches_per_iteration,
            b.microbatches_per_iteration,
        ),
        _delta(
            "iteration",
            "throughput (microbatches / s)",
            "1/s",
            _throughput(a),
            _throughput(b),
        ),
    ]
    ta, tb = a.throughput, b.throughput
    if ta.unit == tb.unit:
        rows.append(
            _delta(
                "iteration", f"throughput ({ta.unit}/s per GPU)", "1/s", ta.per_s_per_gpu, tb.per_s_per_gpu
            )
        )
    if not (math.isnan(ta.mfu) or math.isnan(tb.mfu)):
        rows.append(_delta("iteration", "model FLOPs utilisation (MFU)", "%", 100 * ta.mfu, 100 * tb.mfu))
    for label, attr in BREAKDOWN_PARTS:
        rows.append(
            _delta(
                "breakdown",
                label,
                "ms",
                getattr(a.predicted.breakdown, attr) / 1e6,
                getattr(b.predicted.breakdown, attr) / 1e6,
            )
        )
    names = set(a.kernels_ns) | set(b.kernels_ns)
    moved = {n: abs(b.kernels_ns.get(n, 0.0) - a.kernels_ns.get(n, 0.0)) for n in names}
    # only kernels whose time changes (by more than 10 ns per iteration): the rest is noise
    changes = sorted((n for n, d in moved.items() if d > 10.0), key=lambda n: (-moved[n], n))
    for n in changes[:top]:
        rows.append(_delta("kernel", n, "ms", a.kernels_ns.get(n, 0.0) / 1e6, b.kernels_ns.get(n, 0.0) / 1e6))
    for n in sorted(set(a.collectives_ns) | set(b.collectives_ns)):
        rows.append(
            _delta(
                "collective", n, "ms", a.collectives_ns.get(n, 0.0) / 1e6, b.collectives_ns.get(n, 0.0) / 1e6
            )
        )
    return rows


def _throughput(s: ScenarioSummary) -> float:
    return s.microbatches_per_iteration / (s.iteration_us / 1e6) if s.iteration_us else 0.0


# ------------------------------------------------------------------------------------ why


def explain_task(
    result: ReplayResult | EstimateResult, rank: int, event: int, traced: RankTrace | None = None
) -> list[tuple[str, str]]:
    """Why a predicted task lasts and starts when it does: (label, text) lines for the app.

    ``rank`` is the simulated rank (numbered in the predicted job); ``event`` indexes its events
    (the same indices as the traced rank it comes from, ``traced``).
    """
    if isinstance(result, EstimateResult):
        return [("Duration", result.explain(rank, event))]
    graph = result.graph
    node_of = graph.rank_nodes.get(rank)
    v = int(node_of[event]) if node_of is not None and 0 <= event < len(node_of) else -1
    if v < 0:
        return [("Not a task", "moved with the tasks around it on its lane (not simulated itself)")]
    lines: list[tuple[str, str]] = []
    factor = _scaled_factor(result, v)
    measured = int(graph.dur[v])
    lines.append(
        (
            "Duration",
            f"measured duration kept ({measured / 1000:.1f} µs)"
            if factor is None
            else f"measured {measured / 1000:.1f} µs scaled ×{factor:g} (--scale)",
        )
    )
    disp = int(graph.arrive_of[v]) if graph.arrive_of[v] >= 0 else v
    u, kind = binding_predecessor(graph, result.start, result.end, disp)
    if u >= 0:
        lines.append(("Starts after", _node_text(result, u, kind)))
    else:
        lines.append(("Starts after", "nothing: at its measured start (no earlier dependency)"))
    if graph.arrive_of[v] >= 0:  # a collective: the transfer waits for the last rank to arrive
        j, _ = binding_predecessor(graph, result.start, result.end, v)
        if j >= 0 and graph.node_type[j] == NodeType.JOIN:
            last, _ = binding_predecessor(graph, result.start, result.end, j)
            if last >= 0:
                lines.append(("Transfer waits for", f"rank {int(graph.rank[last])} to arrive (the last one)"))
    u, kind = binding_end_predecessor(graph, result.start, result.end, v)
    if u >= 0:
        lines.append(("Ends when", _node_text(result, u, kind)))
    return lines


def _scaled_factor(result: ReplayResult, v: int) -> float | None:
    if not result.scale:
        return None
    import re

    g = result.graph
    t = g.job.rank(int(g.rank[v]))
    name = t.name_of(int(g.event[v]))
    factor = 1.0
    hit = False
    for pattern, f in result.scale.items():
        if re.search(pattern, name):
            factor *= f
            hit = True
    return factor if hit else None


def _node_text(result: ReplayResult, u: int, kind: int) -> str:
    g = result.graph
    edge = EdgeKind(kind).label if kind >= 0 else "dependency"
    if g.node_type[u] == NodeType.JOIN:
        return f"every rank arrived at the collective ({edge})"
    r, e = int(g.rank[u]), int(g.event[u])
    t = g.job.rank(r)
    name = t.name_of(e) if e >= 0 else "?"
    if len(name) > 90:
        name = name[:87] + "…"
    return f"{name} on rank {r}, {t.lanes[int(t.lane[e])].label} ({edge})"
