"""A predicted timeline arranged to be drawn with the measured one (built off the GUI thread).

Two shapes, chosen by what the engine returned:

* *aligned*: the predicted ranks are the traced ranks with new times (replays; DP, TP, model-size
  and GPU what-ifs): same events, same lanes. Each is drawn in the rows of the traced rank it comes
  from, so the overlay is a second :class:`~app.timeline.layer.Layer` indexed like the measured one
  (ghost, paired rows, or predicted only). When the predicted job has more ranks than were traced
  (DP 16 from 8), the simulated ranks stand for several; their headers say so ("rank 0 (= ranks
  0, 8)").
* *separate*: the estimator built the ranks anew (pipeline, microbatch and layer changes): their
  own events and lanes, numbered in the new job. They are shown on their own, as extra rank groups
  with the measured ranks kept below for reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.loaded_job import LoadedJob
from app.timeline.lane_data import RowTable, build_row_table, empty_table
from app.timeline.layer import IterationMark
from lumos_core.replay.breakdown import iteration_windows
from lumos_core.trace.kernel_families import event_families
from lumos_core.trace.model import RankTrace
from lumos_core.whatif.scenario import ScenarioSummary, traced_sources


@dataclass
class PredictedOverlay:
    """Aligned: one entry per *measured* rank index (the predicted rank drawn in its rows, or the
    measured rank with an empty table when the new job has no counterpart). Separate: one entry per
    predicted rank."""

    ranks: list[RankTrace]
    tables: list[RowTable]
    families: list[np.ndarray]
    present: list[bool]
    labels: list[str]  # header of the rank group, e.g. "rank 0 (= ranks 0, 8) · predicted"
    sim_rank: list[int]  # rank number in the predicted job (-1 when absent)
    iterations: list[list[IterationMark]]
    world_size: int
    same_ranks: bool  # the predicted job has exactly the traced ranks
    separate: bool = False


def stands_for_text(rank: int, ranks: list[int]) -> str:
    """ "rank 0", "rank 0 (= ranks 0, 8)", "rank 0 (= 64 ranks: 0, 8, 16, …)"."""
    if ranks == [rank]:
        return f"rank {rank}"
    if len(ranks) <= 4:
        return f"rank {rank} (= ranks {', '.join(map(str, ranks))})"
    return f"rank {rank} (= {len(ranks)} ranks: {', '.join(map(str, ranks[:3]))}, …)"


def _marks(p: RankTrace) -> list[IterationMark]:
    if not p.iterations:
        return []
    return [IterationMark(w.name, w.start / 1e6, w.end / 1e6) for w in iteration_windows(p)]


def build_overlay(loaded: LoadedJob, timeline: list[RankTrace], summary: ScenarioSummary) -> PredictedOverlay:
    """Row tables of the predicted ``timeline``, aligned with the measured ranks when it can be."""
    job = loaded.job
    sources = traced_sources(job, timeline)
    if timeline and all(i >= 0 for i in sources):
        return _aligned(loaded, timeline, sources, summary)
    return _separate(timeline, summary)


def _aligned(
    loaded: LoadedJob, timeline: list[RankTrace], sources: list[int], summary: ScenarioSummary
) -> PredictedOverlay:
    job = loaded.job
    n = len(job.ranks)
    ranks: list[RankTrace] = list(job.ranks)
    tables: list[RowTable] = [empty_table() for _ in range(n)]
    families = list(loaded.families)
    present = [False] * n
    labels = [f"rank {t.rank} · not in the predicted job" for t in job.ranks]
    sim_rank = [-1] * n
    marks: list[list[IterationMark]] = [[] for _ in range(n)]
    for p, i in zip(timeline, sources):
        if present[i]:
            continue  # two predicted ranks from one traced rank: keep the first
        ranks[i] = p
        tables[i] = build_row_table(p, loaded.families[i])
        present[i] = True
        sim_rank[i] = p.rank
        text = stands_for_text(p.rank, summary.stands_for(p.rank))
        if p.rank != job.ranks[i].rank and summary.stands_for(p.rank) == [p.rank]:
            text += f" (traced rank {job.ranks[i].rank})"
        labels[i] = f"{text} · predicted"
        marks[i] = _marks(p)
    same = summary.world_size == n and all(summary.stands_for(r) == [r] for r in sim_rank if r >= 0)
    return PredictedOverlay(
        ranks, tables, families, present, labels, sim_rank, marks, summary.world_size, same
    )


def _separate(timeline: list[RankTrace], summary: ScenarioSummary) -> PredictedOverlay:
    ranks = sorted(timeline, key=lambda p: p.rank)
    families = [event_families(p) for p in ranks]
    tables = [build_row_table(p, f) for p, f in zip(ranks, families)]
    labels = [f"{stands_for_text(p.rank, summary.stands_for(p.rank))} · predicted" for p in ranks]
    return PredictedOverlay(
        ranks,
        tables,
        families,
        [True] * len(ranks),
        labels,
        [p.rank for p in ranks],
        [_marks(p) for p in ranks],
        summary.world_size,
        same_ranks=False,
        separate=True,
    )


def measured_marks(loaded: LoadedJob) -> list[list[IterationMark]]:
    """Iteration marks of the measured ranks (as the timeline draws them)."""
    index = {t.rank: i for i, t in enumerate(loaded.job.ranks)}
    marks: list[list[IterationMark]] = [[] for _ in loaded.job.ranks]
    for it in loaded.iterations:
        if it.iteration == "whole trace":
            continue
        marks[index[it.rank]].append(
            IterationMark(it.iteration, it.start_ns / 1e6, (it.start_ns + it.dur_ns) / 1e6)
        )
    return marks


__all__ = ["PredictedOverlay", "build_overlay", "measured_marks", "stands_for_text"]
