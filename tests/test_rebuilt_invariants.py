"""Invariants of predicted timelines that a what-if rebuilt (pipeline, microbatch and layer changes)
or only re-timed, as returned and as written to disk: no negative durations, and every parent
operator lies around its children within their span plus the lead and tail its name had when it was
measured (a rebuilt task has no measured time of its own: the parent is placed from its children)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.graph import GraphOrigin, build_graph
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Job, RankTrace
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.export import write_job
from lumos_core.whatif.rewrite import build_rewritten

DATA = Path(__file__).parent / "data" / "cpu-gpt"
TOL_NS = 1_000  # integer rounding of shifted and written (µs) times


def _name(t: RankTrace, i: int) -> str:
    return re.sub(r"#\d+$", "", t.name_of(i))  # ProfilerStep#3 and ProfilerStep#7 are one operator


def lead_and_tail(t: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parents (events with children), the time before their first child and after their last."""
    par = t.parent
    kids = np.flatnonzero(par >= 0)
    first = np.full(len(t), np.iinfo(np.int64).max)
    last = np.full(len(t), np.iinfo(np.int64).min)
    np.minimum.at(first, par[kids], t.start[kids])
    np.maximum.at(last, par[kids], t.end[kids])
    parents = np.unique(par[kids])
    return parents, first[parents] - t.start[parents], t.end[parents] - last[parents]


def measured_bounds(job: Job) -> dict[str, tuple[int, int]]:
    """Per operator name, the longest time it ran before one of its children started and after one
    of its children ended (a rebuilt copy may hold only some of the children: those of its segment)."""
    out: dict[str, tuple[int, int]] = {}
    for t in job.ranks:
        kids = np.flatnonzero(t.parent >= 0)
        par = t.parent[kids]
        lead = np.zeros(len(t), np.int64)
        tail = np.zeros(len(t), np.int64)
        np.maximum.at(lead, par, t.start[kids] - t.start[par])
        np.maximum.at(tail, par, t.end[par] - t.end[kids])
        for p in np.unique(par).tolist():
            name = _name(t, p)
            a0, b0 = out.get(name, (0, 0))
            out[name] = (max(a0, int(lead[p])), max(b0, int(tail[p])))
    return out


def check_predicted(bounds: dict[str, tuple[int, int]], t: RankTrace, *, retimed_cpu: bool = False) -> None:
    """No negative durations; children inside their parent; a parent no further out than its name's
    measured bounds. ProfilerStep marks an iteration window (up to the next one's start), operators the
    rewrite creates were never measured, and re-timed CPU operators scale their own time: for those
    only the nesting is checked."""
    assert np.all(t.dur >= 0), f"rank {t.rank}: negative durations"
    parents, lead, tail = lead_and_tail(t)
    bad = []
    for p, a, b in zip(parents.tolist(), lead.tolist(), tail.tolist()):
        name = _name(t, p)
        if a < -TOL_NS or b < -TOL_NS:
            bad.append((name, int(t.dur[p]), a, b, "children outside"))
            continue
        if retimed_cpu or name == "ProfilerStep" or name not in bounds:
            continue
        lead_max, tail_max = bounds[name]
        if a > lead_max + TOL_NS or b > tail_max + TOL_NS:
            bad.append((name, int(t.dur[p]), a, lead_max, b, tail_max))
    assert not bad, f"rank {t.rank}: parents outside their children's span plus measured lead/tail: {bad[:5]}"


CASES = [
    ("base", {"layers": 8}),  # rebuilt: layers duplicated
    ("base", {"layers": 2}),  # rebuilt: layers dropped
    ("mb4", {"pp": 2}),  # rebuilt: a pipeline of two stages
    ("mb4", {"microbatches": 2}),  # rebuilt: fewer microbatches
    ("dp2", {"pp": 2, "microbatches": 2}),
    ("base", {"hidden": 512}),  # re-timed only (CPU operators scale their own time)
]


@pytest.mark.parametrize(("folder", "changes"), CASES, ids=[f"{f}-{c}" for f, c in CASES])
def test_predicted_timelines_keep_parents_around_children(folder: str, changes: dict, tmp_path: Path) -> None:
    job = load_job(DATA / folder, workers=1)
    bounds = measured_bounds(job)
    result = estimate(job, changes)
    retimed_cpu = "hidden" in changes
    assert result.timeline
    for t in result.timeline:
        check_predicted(bounds, t, retimed_cpu=retimed_cpu)
    write_job(result.timeline, result.represents, tmp_path / "out", result.world_size)
    written = load_job(tmp_path / "out", workers=1, use_cache=False)
    for t in written.ranks:
        check_predicted(bounds, t, retimed_cpu=retimed_cpu)


def test_a_rebuilt_graph_has_no_measured_times() -> None:
    job = load_job(DATA / "base", workers=1)
    graph = build_graph(job)
    assert graph.origin is GraphOrigin.TRACED
    start, end = graph.measured()
    assert np.all(end >= start)
    baseline = infer_baseline(job)
    rw = build_rewritten(job, graph, baseline, baseline.config.with_changes(layers=8), [])
    assert rw.graph.origin is GraphOrigin.REBUILT
    assert rw.graph.measured_start is None and rw.graph.measured_end is None
    with pytest.raises(ValueError, match="rebuilt execution graph has no measured times"):
        rw.graph.measured()


@needs_shared
def test_nanogpt_rebuilt_timelines_keep_parents_around_children() -> None:
    job = load_job(shared("h100-nanogpt-8rank"), workers=1)
    bounds = measured_bounds(job)
    result = estimate(job, {"layers": 4})
    for t in result.timeline:
        check_predicted(bounds, t)
