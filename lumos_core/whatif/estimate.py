"""``lumos estimate``: predict a configuration that was never run (paper §3.4), by rewriting the
execution graph of the traced run and replaying it.

:func:`estimate` is a plain, picklable function of (loaded job, configuration) -> result, so many
can run in parallel (sweeps). The rewrite keeps the traced dependency patterns: durations change
(:mod:`lumos_core.whatif.retime`: collectives for new group and message sizes, kernels for new model
shapes or GPUs) and, for pipeline, microbatch and layer changes, the graph itself is rebuilt from
the traced per-layer tasks (:mod:`lumos_core.whatif.rewrite`).

Ranks that a configuration adds are copies of the traced ones they correspond to (data-parallel
replicas run the same work), so a job of 512 GPUs is simulated with its distinct ranks only and
expanded when its timeline is exported.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.perf.nccl import NcclModel
from lumos_core.perf.profile import HardwareProfile
from lumos_core.progress import Progress, no_progress, scaled
from lumos_core.replay.breakdown import (
    ITERATION_DEFINITION,
    Breakdown,
    Window,
    activity_events,
    breakdowns,
    steady_windows,
)
from lumos_core.replay.outcome import Outcome, outcome_from, outcome_of
from lumos_core.replay.run import predicted_rank
from lumos_core.replay.simulate import simulate
from lumos_core.trace.model import Job, RankTrace
from lumos_core.whatif.baseline import group_roles, infer_baseline
from lumos_core.whatif.config import Baseline, JobConfig, check, unchecked
from lumos_core.whatif.knob_registry import KNOB, REWRITE, changed_knobs, unmodelled_notes
from lumos_core.whatif.memory_calibration import predict_for_job
from lumos_core.whatif.memory_model import MemoryPrediction
from lumos_core.whatif.retime import RetimeContext, RetimePlan, Retiming, comm_model_from_trace, plan_retiming
from lumos_core.whatif.retime.host import scale_host
from lumos_core.whatif.throughput import (
    GPU_BOUND_CPU_SCALE,
    Throughput,
    throughput_of,
    vocab_of,
    work_changed,
)

ESTIMATE_DEFINITION = (
    "predicted iteration time = mean over simulated ranks of their mean iteration time, over the "
    "iterations between consecutive ProfilerStep starts (the last, partial iteration is left out "
    "when there are several); breakdown likewise"
)
__all__ = ["ESTIMATE_DEFINITION", "EstimateResult", "Estimator", "Outcome", "estimate", "outcome_of"]


@dataclass
class EstimateResult:
    """What :func:`estimate` returns (picklable: plain data and numpy arrays)."""

    baseline: Baseline
    measured: Outcome  # the trace itself
    replayed: Outcome  # the unmodified graph replayed (what identity predictions are held to)
    predicted: Outcome
    world_size: int
    timeline: list[RankTrace]  # simulated ranks, numbered in the new job
    represents: dict[int, list[int]]  # simulated rank -> the ranks of the new job it stands for
    retimed: list[Retiming]
    why: dict[int, np.ndarray]  # simulated rank -> per event: index into ``retimed`` (-1: measured)
    old_dur: dict[int, np.ndarray]  # simulated rank -> per event: its measured duration (ns)
    seconds: float
    notes: list[str] = field(default_factory=list)
    memory: MemoryPrediction | None = None  # None when the model shape is unknown
    # The headline beside iteration time (whatif/throughput.py): rate per GPU and MFU of the
    # prediction, of the replayed and of the measured baseline; None only for results built by hand.
    throughput: Throughput | None = None
    baseline_throughput: Throughput | None = None
    measured_throughput: Throughput | None = None
    work_changed: bool = False  # different work per iteration than the baseline: rank by rate
    # Share of the traced iteration the host (CPU) sets, when a GPU what-if barely moved the
    # iteration because of it (the "CPU-paced by N %" note); None when not CPU-paced
    cpu_paced: float | None = None

    @property
    def throughput_change_pct(self) -> float:
        """The rate per GPU against the replayed baseline's, in % (NaN unknown)."""
        if self.throughput is None or self.baseline_throughput is None:
            return float("nan")
        return self.throughput.change_pct(self.baseline_throughput)

    def headline(self) -> str:
        """One line that leads the text output: change, rate, MFU, and the CPU-paced warning."""
        change = (
            100 * (self.predicted.iteration_us / self.replayed.iteration_us - 1)
            if self.replayed.iteration_us
            else 0.0
        )
        line = f"predicted {self.predicted.iteration_us / 1000:.3f} ms per iteration ({change:+.1f} %)"
        if self.throughput is not None:
            line += f", {self.throughput.text()}"
            tc = self.throughput_change_pct
            if self.work_changed and tc == tc:
                line += (
                    f"; throughput {tc:+.1f} % per GPU (the work per iteration changes: compare throughput)"
                )
        if self.cpu_paced is not None:
            line = (
                f"CPU-paced by {100 * self.cpu_paced:.0f} %: the host (Python, launches) hides this GPU "
                f"what-if; try --cpu-scale {GPU_BOUND_CPU_SCALE} (assume GPU-bound)\n" + line
            )
        return line

    def explain(self, rank: int, event: int) -> str:
        """Why a predicted task lasts what it lasts (for the app's details panel)."""
        w = int(self.why[rank][event]) if rank in self.why else -1
        t = next(p for p in self.timeline if p.rank == rank)
        old = int(self.old_dur[rank][event])
        new = int(t.dur[event])
        if w < 0:
            return f"measured duration kept ({old / 1000:.1f} µs)"
        r = self.retimed[w]
        return (
            f"{r.what}: {r.model}"
            + (f" ({r.detail})" if r.detail else "")
            + f"; measured {old / 1000:.1f} µs -> predicted {new / 1000:.1f} µs"
        )

    def as_dict(self) -> dict[str, Any]:
        b = self.baseline
        return {
            "definition": ESTIMATE_DEFINITION,
            "iteration_definition": ITERATION_DEFINITION,
            "baseline": {
                **self.measured.as_dict(),
                "replayed_iteration_us": round(self.replayed.iteration_us, 3),
                "replayed_breakdown": self.replayed.breakdown.as_us(),
                "inferred": {
                    k: {"value": v.value, "confidence": v.confidence, "how": v.how}
                    for k, v in b.fields.items()
                },
            },
            "predicted": {
                **self.predicted.as_dict(),
                "ranks": self.world_size,
                "simulated_ranks": sorted(self.represents),
                "change_pct": round(100 * (self.predicted.iteration_us / self.replayed.iteration_us - 1), 3)
                if self.replayed.iteration_us
                else 0.0,
            },
            "retimed": [r.as_dict() for r in self.retimed],
            "seconds": round(self.seconds, 3),
            "notes": self.notes,
            "memory": self.memory.as_dict() if self.memory is not None else None,
            "throughput": {
                "measured": self.measured_throughput.as_dict() if self.measured_throughput else None,
                "replayed": self.baseline_throughput.as_dict() if self.baseline_throughput else None,
                "predicted": self.throughput.as_dict() if self.throughput else None,
                "change_pct": None
                if self.throughput_change_pct != self.throughput_change_pct
                else round(self.throughput_change_pct, 3),
                "work_changed": self.work_changed,
                "rank_by": "throughput" if self.work_changed else "iteration time",
            },
            "cpu_paced": None
            if self.cpu_paced is None
            else {"share_pct": round(100 * self.cpu_paced, 1), "suggested_cpu_scale": GPU_BOUND_CPU_SCALE},
        }


# ---------------------------------------------------------------------------------------------- API


def estimate(
    job: Job,
    config: JobConfig | dict[str, Any] | None = None,
    *,
    baseline: Baseline | None = None,
    progress: Progress = no_progress,
    graph: ExecutionGraph | None = None,
    profile: HardwareProfile | None = None,
) -> EstimateResult:
    """Predict ``config`` (a JobConfig, or a dict of changes to the inferred baseline) from ``job``.
    ``profile``: a hardware profile fitted on the cluster's runs (``lumos calibrate``). One
    estimate; for several of one job, keep an :class:`Estimator`."""
    return Estimator(job, baseline=baseline, graph=graph, profile=profile).estimate(config, progress=progress)


@dataclass
class Reference:
    """What every estimate of one job shares: the traced configuration replayed, per rank."""

    events: dict[int, tuple[np.ndarray, np.ndarray]]  # rank -> its breakdown's events
    measured: Outcome  # the trace itself
    replayed_rows: list[tuple[int, list[Window], list[Breakdown]]]  # per traced rank, in job order
    replayed: Outcome  # the unmodified graph replayed
    model: NcclModel  # the collective model, calibrated on the trace (or the profile's links)


class Estimator:
    """Estimates configurations of one traced job, computing what they share once: the baseline
    (inferred unless given), the execution graph, the traced configuration replayed, the collective
    model calibrated on the trace and the host pacing. Sweeps (one per worker), ``lumos validate``,
    the public API and the app keep one per job; the first estimate (or :meth:`prepare`) pays for
    the shared part. Each estimate is what :func:`estimate` returns for the same arguments."""

    def __init__(
        self,
        job: Job,
        *,
        baseline: Baseline | None = None,
        graph: ExecutionGraph | None = None,
        profile: HardwareProfile | None = None,
    ) -> None:
        self.job = job
        self.baseline = baseline or infer_baseline(job)
        self.graph = graph
        self.profile = profile
        self.reference: Reference | None = None
        self.host_pacing: Outcome | None = None  # the traced job with no host time (when asked)

    def prepare(self, progress: Progress = no_progress) -> Reference:
        """The execution graph and the traced configuration replayed (once)."""
        if self.reference is not None:
            return self.reference
        job, base = self.job, self.baseline.config
        progress(0.02, "building the execution graph")
        self.graph = self.graph or build_graph(job, progress=scaled(progress, 0.02, 0.4))
        progress(0.45, "replaying the traced configuration")
        start0, end0 = simulate(self.graph)
        # Every rank's measured and replayed outcome rows, a rank at a time: a replayed timeline is
        # dropped once its row is taken. The breakdown's events depend on the event table only, so a
        # rank's measured, replayed and predicted timelines share them.
        events = {t.rank: activity_events(t) for t in job.ranks}
        measured = outcome_from(base, [outcome_row(t, events[t.rank]) for t in job.ranks])
        rows = [outcome_row(predicted_rank(self.graph, t, start0, end0), events[t.rank]) for t in job.ranks]
        del start0, end0
        model = comm_model_from_trace(job, self.graph, base.gpu_profile)
        if self.profile is not None and self.profile.comm is not None and not _fitted(model):
            # the trace has no collectives to calibrate on: the cluster's profile knows its links
            model = dataclasses.replace(model, params=self.profile.comm)
        self.reference = Reference(events, measured, rows, outcome_from(base, rows), model)
        return self.reference

    def estimate(
        self, config: JobConfig | dict[str, Any] | None = None, *, progress: Progress = no_progress
    ) -> EstimateResult:
        """Predict ``config`` (a JobConfig, or a dict of changes to the baseline; None: the
        baseline itself)."""
        t0 = time.perf_counter()
        job, baseline, profile = self.job, self.baseline, self.profile
        if config is None:
            config = baseline.config
        elif isinstance(config, dict):
            config = baseline.config.with_changes(**config)
        check(config, baseline)
        ref = self.prepare(progress)
        graph = self.graph
        assert graph is not None
        events, measured, replayed_rows, replayed = ref.events, ref.measured, ref.replayed_rows, ref.replayed
        ranks = {t.rank: t for t in job.ranks}
        base = baseline.config

        changed = changed_knobs(base, config)
        # knobs whose rule is the rewrite (knob_registry.REWRITE) rebuild the graph; so does data
        # parallelism added to a trace with no collective to copy
        structural = any(REWRITE in KNOB[k].rules for k in changed) or (
            base.dp == 1 and config.dp > 1 and not _has_collectives(job)
        )
        layout = {} if structural else _replica_layout(job, base, config)

        progress(0.55, "rewriting the graph")
        notes: list[str] = unchecked(config, baseline) + unmodelled_notes(changed, config.as_dict())
        if base.dp == 1 and config.dp > 1 and not structural and not _has_gradient_sync(job):
            # a TP/PP job traced at DP 1: collectives, none of them data-parallel, so copying ranks
            # adds no gradient synchronisation; say so rather than pass the number off as whole
            notes.append(
                f"DP {config.dp}: the trace (DP 1) has no data-parallel gradient collective to copy, so "
                "gradient synchronisation is not in this prediction; a trace recorded at DP >= 2 has it"
            )
        model = ref.model
        timeline, why, old_dur = [], {}, {}
        if structural:
            from lumos_core.whatif.rewrite import (
                build_rewritten,  # pipeline / microbatch / layer changes rebuild the graph
            )
            from lumos_core.whatif.rewrite_timeline import rewritten_timelines

            rw = build_rewritten(job, graph, baseline, config, notes)
            ctx = RetimeContext.make(job, rw.graph, baseline, config, model, profile)
            plan = plan_retiming(ctx)
            notes.extend(ctx.notes)
            created = np.flatnonzero((rw.graph.event < 0) & (rw.graph.node_type == NodeType.GPU))
            plan.apply(
                created, 1.0, "PP send/recv", "NCCL model of the activation size (created by the rewrite)"
            )
            dur = np.maximum(np.rint(rw.graph.dur * plan.ratio), 0).astype(np.int64)
            progress(0.7, f"simulating {rw.graph.n_nodes} tasks")
            start, end = simulate(rw.graph, dur, _lags(rw.graph, plan))
            progress(0.9, "building the predicted timeline")
            timeline, rows = rewritten_timelines(rw, start, end, ranks)
            for p in timeline:
                node = rows[p.rank]
                has = node >= 0
                w = np.full(len(p), -1, np.int32)
                w[has] = plan.why[node[has]]
                why[p.rank] = w
                od = np.zeros(len(p), np.int64)
                od[has] = rw.graph.dur[node[has]]
                old_dur[p.rank] = od
            represents = rw.represents
        else:
            ctx = RetimeContext.make(job, graph, baseline, config, model, profile)
            plan = plan_retiming(ctx)
            notes.extend(ctx.notes)
            dur = np.maximum(np.rint(graph.dur * plan.ratio), 0).astype(np.int64)
            progress(0.7, f"simulating {graph.n_nodes} tasks")
            start, end = simulate(graph, dur, _lags(graph, plan))
            progress(0.9, "building the predicted timeline")
            for t in job.ranks:
                if t.rank not in layout:
                    continue
                p = predicted_rank(graph, t, start, end)
                node_of = graph.rank_nodes[t.rank]
                w = np.full(len(t), -1, np.int32)
                has = node_of >= 0
                w[has] = plan.why[node_of[has]]
                p.rank = layout[t.rank][0]
                timeline.append(p)
                why[p.rank] = w
                old_dur[p.rank] = t.dur.copy()
            represents = {layout[r][0]: layout[r] for r in layout}
        if structural:
            predicted = outcome_of(config, timeline)
        else:  # the kept ranks' timelines, in job order, share their traced rank's events
            traced_of = {layout[r][0]: r for r in layout}
            predicted = outcome_from(config, [outcome_row(p, events[traced_of[p.rank]]) for p in timeline])
        if not structural and len(layout) < len(job.ranks):
            kept = [row for t, row in zip(job.ranks, replayed_rows) if t.rank in layout]
            note_kept_ranks(sorted(layout), outcome_from(base, kept), replayed, predicted, notes)
        cpu_paced = None
        if config.cpu_scale == 1.0:
            cpu_bound = _note_cpu_bound(replayed, predicted, notes)
            if cpu_bound or _unchanged(replayed, predicted):
                # a GPU what-if that barely moves the iteration: say how much the host sets the pace
                # (always after the CPU-bound note; otherwise only when the host sets >= 10 % of it)
                share = 0.0 if cpu_bound else 0.10
                if self.host_pacing is None:
                    self.host_pacing = host_pacing(job, graph, base, events)
                cpu_paced, note = host_pacing_share(
                    job, graph, base, replayed, min_share=share, fast=self.host_pacing
                )
                if note:
                    notes.append(note)
        memory = predict_memory_or_note(job, baseline, config, notes)
        progress(1.0, "estimate done")
        return EstimateResult(
            baseline=baseline,
            measured=measured,
            replayed=replayed,
            predicted=predicted,
            world_size=config.world_size,
            timeline=timeline,
            represents=represents,
            retimed=plan.rules,
            why=why,
            old_dur=old_dur,
            seconds=time.perf_counter() - t0,
            notes=notes,
            memory=memory,
            throughput=throughput_of(config, predicted.iteration_us, vocab_of(baseline)),
            baseline_throughput=throughput_of(base, replayed.iteration_us, vocab_of(baseline)),
            measured_throughput=throughput_of(base, measured.iteration_us, vocab_of(baseline)),
            work_changed=work_changed(base, config),
            cpu_paced=cpu_paced,
        )


def outcome_row(
    t: RankTrace, events: tuple[np.ndarray, np.ndarray]
) -> tuple[int, list[Window], list[Breakdown]]:
    """A rank's row for :func:`~lumos_core.replay.outcome.outcome_from` (what
    :func:`~lumos_core.replay.outcome.outcome_of` computes per rank), with the breakdown's events
    (:func:`~lumos_core.replay.breakdown.activity_events`) of its event table given."""
    windows = steady_windows(t)
    if not windows:
        return t.rank, windows, []
    idx, comm = events
    starts = np.asarray(t.start)[idx]
    return t.rank, windows, breakdowns(starts, starts + np.asarray(t.dur)[idx], comm, windows)


def note_kept_ranks(
    kept: list[int],
    own: Outcome,
    replayed: Outcome,
    predicted: Outcome,
    notes: list[str],
) -> None:
    """The prediction simulates only some traced ranks (fewer replicas): when their own replayed
    time (``own``: the outcome of the traced job's replay over those ranks) differs from the job's
    mean (ranks whose iteration windows differ), the change against the whole job mixes that
    difference in, so say what it is against those very ranks."""
    if not own.iteration_us or not replayed.iteration_us:
        return
    if abs(own.iteration_us / replayed.iteration_us - 1) <= 0.02:
        return
    change = 100 * (predicted.iteration_us / own.iteration_us - 1)
    notes.append(
        f"the simulated ranks {kept} replay at {own.iteration_us / 1000:.3f} ms in the traced job, the "
        f"job's mean over every rank is {replayed.iteration_us / 1000:.3f} ms (its ranks' iteration times "
        f"differ): against those ranks the prediction is {change:+.1f} %"
    )


def predict_memory_or_note(
    job: Job, baseline: Baseline, config: JobConfig, notes: list[str]
) -> MemoryPrediction | None:
    """The memory prediction of ``config``, or None with a note when the model shape is unknown."""
    try:
        return predict_for_job(job, baseline, config)
    except ValueError as exc:
        notes.append(f"no memory prediction: {exc} (give it with --baseline-<knob>)")
        return None


def host_pacing(
    job: Job,
    graph: ExecutionGraph,
    base: JobConfig,
    events: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Outcome:
    """The traced configuration replayed with no host time (CPU tasks and the gaps between them at
    zero): how fast the GPUs alone would run it. ``events``: each rank's breakdown events
    (:func:`~lumos_core.replay.breakdown.activity_events`) when the caller has them."""
    plan = RetimePlan.identity(graph.n_nodes)
    scale_host(graph, plan, 0.0)
    dur = np.maximum(np.rint(graph.dur * plan.ratio), 0).astype(np.int64)
    start, end = simulate(graph, dur, _lags(graph, plan))
    events = events or {t.rank: activity_events(t) for t in job.ranks}
    return outcome_from(
        base, [outcome_row(predicted_rank(graph, t, start, end), events[t.rank]) for t in job.ranks]
    )


def host_pacing_note(
    job: Job,
    graph: ExecutionGraph,
    base: JobConfig,
    replayed: Outcome,
    min_share: float = 0.0,
    events: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    fast: Outcome | None = None,
) -> str:
    """How much of the traced iteration the host (CPU) side sets, in words; empty when it sets less
    than ``min_share`` of it. ``fast``: :func:`host_pacing` of the job when the caller has it."""
    return host_pacing_share(job, graph, base, replayed, min_share, events, fast)[1]


def host_pacing_share(
    job: Job,
    graph: ExecutionGraph,
    base: JobConfig,
    replayed: Outcome,
    min_share: float = 0.0,
    events: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    fast: Outcome | None = None,
) -> tuple[float | None, str]:
    """(share of the traced iteration the host sets, its note); (None, "") below ``min_share``."""
    fast = fast or host_pacing(job, graph, base, events)
    if not replayed.iteration_us or not fast.iteration_us:
        return None, "host pacing unknown: no complete iteration"
    share = 1 - fast.iteration_us / replayed.iteration_us
    if share < min_share:
        return None, ""
    return share, (
        f"CPU-paced by {100 * share:.0f}%: with no host time the traced iteration would take "
        f"{fast.iteration_us / 1000:.2f} ms instead of {replayed.iteration_us / 1000:.2f} ms; GPU what-ifs "
        "on this trace need --cpu-scale (e.g. 0.3 for CUDA graphs or torch.compile, 0 for GPU-bound)"
    )


def _unchanged(replayed: Outcome, predicted: Outcome) -> bool:
    """The predicted iteration within 0.5 % of the replayed one."""
    return bool(replayed.iteration_us) and abs(predicted.iteration_us / replayed.iteration_us - 1) < 0.005


def _note_cpu_bound(replayed: Outcome, predicted: Outcome, notes: list[str]) -> bool:
    """Say so when the GPU work changed but the iteration did not: the CPU (Python, launches) sets
    the pace, and the saving only shows as idle GPU time."""
    busy = lambda o: o.breakdown.exposed_compute_ns + o.breakdown.overlapped_ns + o.breakdown.exposed_comm_ns  # noqa: E731
    if not replayed.iteration_us or not busy(replayed):
        return False
    it_change = predicted.iteration_us / replayed.iteration_us - 1
    busy_change = busy(predicted) / busy(replayed) - 1
    if abs(it_change) < 0.005 and abs(busy_change) > 0.02:
        notes.append(
            f"GPU busy time changes {100 * busy_change:+.1f}% but the iteration only {100 * it_change:+.2f}%: "
            "the CPU thread (Python and launch calls) sets the pace of this job, so faster or slower "
            "GPU work mostly changes idle GPU time (see the critical path in lumos replay --json)"
        )
        return True
    return False


def _fitted(model: Any) -> bool:
    p = model.params
    return p.source_intra != "profile" or p.source_inter != "profile"


def _has_collectives(job: Job) -> bool:
    return any(len(t.collectives) for t in job.ranks)


def _has_gradient_sync(job: Job) -> bool:
    """Whether a traced collective runs on a data-parallel or whole-world group (the groups the
    rewrite's ``_dp_collective_nodes`` takes for gradient synchronisation; unnamed groups count)."""
    roles = group_roles(job)[0]
    for t in job.ranks:
        for p in np.unique(t.collectives.pg).tolist() if len(t.collectives) else []:
            if (roles.get(t.strings[p], "dp") if p >= 0 else "dp") in ("dp", "world"):
                return True
    return False


def _lags(graph: ExecutionGraph, plan: RetimePlan) -> np.ndarray | None:
    if plan.lag_ratio is None:
        return None
    return np.rint(graph.sp_lag * plan.lag_ratio).astype(np.int64)


def _replica_layout(job: Job, base: JobConfig, config: JobConfig) -> dict[int, list[int]]:
    """Traced rank -> the ranks of the new job it stands for. Ranks are numbered as Megatron does
    (tensor-parallel fastest, then data-parallel, then pipeline); a new rank is a copy of the traced
    rank in the same pipeline stage with its tensor- and data-parallel position folded onto the
    traced ones (replicas run the same work)."""
    out: dict[int, list[int]] = {}
    traced = {t.rank for t in job.ranks}
    dp_new, dp_old = config.dp * config.cp, base.dp * base.cp  # CP ranks fold like DP replicas
    for new in range(config.world_size):
        t_new = new % config.tp
        d_new = (new // config.tp) % dp_new
        p_new = new // (config.tp * dp_new)
        src = (t_new % base.tp) + base.tp * ((d_new % dp_old) + dp_old * p_new)
        if src in traced:
            out.setdefault(src, []).append(new)
    return out
