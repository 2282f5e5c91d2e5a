"""A predicted timeline arranged to be drawn over the measured one (built off the GUI thread).

The predicted ranks of a replay or an estimate are the traced ranks with new times: same events,
same lanes. Each is drawn in the rows of the traced rank it was derived from, so the overlay is a
second :class:`~app.span_item.Layer` indexed like the measured one. When the predicted job has a
different number of ranks (DP 16 from 8 traced), the simulated ranks stand for several ranks of the
new job; their headers say so ("rank 0 (= ranks 0, 8)").
"""

from __future__ import annotations

from dataclasses import dataclass

from lumos_core.breakdown import iteration_windows
from lumos_core.kernel_families import event_families
from lumos_core.scenario import ScenarioSummary, traced_sources
from lumos_core.trace import RankTrace

from .lane_data import RowTable, build_row_table, empty_table
from .loaded_job import LoadedJob
from .span_item import IterationMark


@dataclass
class PredictedOverlay:
    """Per *measured* rank index: the predicted rank drawn in its rows (or the measured rank with an
    empty table when the new job has no counterpart), its header label and its iterations."""

    ranks: list[RankTrace]
    tables: list[RowTable]
    present: list[bool]
    labels: list[str]  # header of the rank group, e.g. "rank 0 (= ranks 0, 8) · predicted"
    sim_rank: list[int]  # rank number in the predicted job (-1 when absent)
    iterations: list[list[IterationMark]]
    world_size: int
    same_ranks: bool  # the predicted job has exactly the traced ranks

    def index_of_sim_rank(self, rank: int) -> int:
        return self.sim_rank.index(rank) if rank in self.sim_rank else -1


def stands_for_text(rank: int, ranks: list[int]) -> str:
    """ "rank 0", "rank 0 (= ranks 0, 8)", "rank 0 (= 64 ranks: 0, 8, 16, …)"."""
    if ranks == [rank]:
        return f"rank {rank}"
    if len(ranks) <= 4:
        return f"rank {rank} (= ranks {', '.join(map(str, ranks))})"
    return f"rank {rank} (= {len(ranks)} ranks: {', '.join(map(str, ranks[:3]))}, …)"


def build_overlay(loaded: LoadedJob, timeline: list[RankTrace], summary: ScenarioSummary) -> PredictedOverlay:
    """Row tables of the predicted ``timeline`` in the rows of the measured ranks they come from."""
    job = loaded.job
    n = len(job.ranks)
    sources = traced_sources(job, timeline)
    ranks: list[RankTrace] = list(job.ranks)
    tables: list[RowTable] = [empty_table() for _ in range(n)]
    present = [False] * n
    labels = [f"rank {t.rank} · not in the predicted job" for t in job.ranks]
    sim_rank = [-1] * n
    marks: list[list[IterationMark]] = [[] for _ in range(n)]
    for p, i in zip(timeline, sources):
        if present[i]:
            continue  # two predicted ranks from one traced rank: keep the first
        fam = loaded.families[i] if len(loaded.families[i]) == len(p) else event_families(p)
        ranks[i] = p
        tables[i] = build_row_table(p, fam)
        present[i] = True
        sim_rank[i] = p.rank
        text = stands_for_text(p.rank, summary.stands_for(p.rank))
        if p.rank != job.ranks[i].rank and summary.stands_for(p.rank) == [p.rank]:
            text += f" (traced rank {job.ranks[i].rank})"
        labels[i] = f"{text} · predicted"
        marks[i] = [
            IterationMark(w.name, w.start / 1e6, w.end / 1e6) for w in iteration_windows(p) if p.iterations
        ]
    same = summary.world_size == n and all(summary.stands_for(r) == [r] for r in sim_rank if r >= 0)
    return PredictedOverlay(ranks, tables, present, labels, sim_rank, marks, summary.world_size, same)


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
