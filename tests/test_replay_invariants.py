"""Invariants of replayed timelines: no negative durations, a parent operator stays around its
children (within their span plus its measured lead and tail), CPU-only breakdowns count compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.replay.breakdown import rank_breakdowns
from lumos_core.replay.run import replay
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import RankTrace

CPU_GPT = Path(__file__).parent / "data" / "cpu-gpt" / "base"
TOL_NS = 1_000  # integer rounding of shifted times


def check_timeline(measured: RankTrace, predicted: RankTrace) -> None:
    assert np.all(predicted.dur >= 0)
    par = predicted.parent
    kids = np.flatnonzero(par >= 0)
    if len(kids) == 0:
        return
    n = len(predicted)
    first_m = np.full(n, np.iinfo(np.int64).max)
    last_m = np.full(n, np.iinfo(np.int64).min)
    first_p = first_m.copy()
    last_p = last_m.copy()
    np.minimum.at(first_m, par[kids], measured.start[kids])
    np.maximum.at(last_m, par[kids], measured.end[kids])
    np.minimum.at(first_p, par[kids], predicted.start[kids])
    np.maximum.at(last_p, par[kids], predicted.end[kids])
    parents = np.unique(par[kids])
    lead = first_m[parents] - measured.start[parents]
    tail = measured.end[parents] - last_m[parents]
    lo = first_p[parents] - lead - TOL_NS
    hi = last_p[parents] + tail + TOL_NS
    bad = (predicted.start[parents] < lo) | (predicted.end[parents] > hi)
    assert not bad.any(), [
        (predicted.name_of(int(p)), int(predicted.dur[p]), int(measured.dur[p])) for p in parents[bad][:5]
    ]


def test_cpu_only_breakdown_counts_the_operators_under_profiler_steps() -> None:
    job = load_job(CPU_GPT, workers=1)
    for w, b in rank_breakdowns(job.ranks[0]):
        assert b.exposed_compute_ns > 0.5 * w.length, (w.name, b)
        assert b.other_ns < w.length


@pytest.mark.parametrize("folder", [str(CPU_GPT), "a100-ddp-2rank"])
def test_replayed_timelines_keep_parents_around_children(folder) -> None:
    path = Path(folder) if folder == str(CPU_GPT) else shared(folder)
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is absent)")
    job = load_job(path, workers=1)
    res = replay(job, critical_paths=False)
    for t, p in zip(job.ranks, res.timeline):
        check_timeline(t, p)
    for r in res.ranks:  # CPU-only or not, the replayed breakdown counts work
        for it in r.iterations:
            assert it.replayed_breakdown.exposed_compute_ns + it.replayed_breakdown.overlapped_ns > 0


@needs_shared
def test_replayed_nanogpt_timelines_keep_parents_around_children() -> None:
    job = load_job(shared("h100-nanogpt-8rank"), workers=1)
    res = replay(job, critical_paths=False)
    for t, p in zip(job.ranks, res.timeline):
        check_timeline(t, p)


@pytest.mark.parametrize("folder", [str(CPU_GPT), "a100-ddp-2rank"])
def test_holdout_timelines_keep_parents_around_children(folder) -> None:
    """The hold-out replays (a graph learned from the other iterations) are timelines too. Their
    tasks move against each other, and an operator's time after its last child stretches with the
    gap it sits in (replay.run.predicted_rank), so the check is the rebuilt-timeline one of
    test_rebuilt_invariants: within the lead and tail its name ever had when measured."""
    from test_rebuilt_invariants import check_predicted, measured_bounds

    from lumos_core.graph.build import build_graph
    from lumos_core.replay.holdout import holdout_graph
    from lumos_core.replay.run import predicted_rank
    from lumos_core.replay.simulate import simulate
    from lumos_core.replay.twins import iterations_of

    path = Path(folder) if folder == str(CPU_GPT) else shared(folder)
    if not path.exists():
        pytest.skip(f"{path} not available (../shared is absent)")
    job = load_job(path, workers=1)
    graph = build_graph(job)
    its = iterations_of(graph)
    bounds = measured_bounds(job)
    for k in range(its.count):
        h = holdout_graph(graph, its, k)
        start, end = simulate(h.graph)
        for t in job.ranks:
            check_predicted(bounds, predicted_rank(h.graph, t, start, end))
