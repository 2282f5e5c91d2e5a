"""A predicted timeline arranged to be drawn with the measured one (built off the GUI thread).

Two shapes, chosen by what the engine returned:

* *aligned*: the predicted ranks are the traced ranks with new times (replays; DP, TP, model-size
  and GPU what-ifs): same events, same lanes. Each is drawn in the rows of the traced rank it comes
  from, so the overlay is a second :class:`~app.view_model.layer.Layer` indexed like the measured one
  (ghost, paired rows, or predicted only). When the predicted job has more ranks than were traced
  (DP 16 from 8), the simulated ranks stand for several; their headers say so ("rank 0 (= ranks
  0, 8)").
* *separate*: the estimator built the ranks anew (pipeline, microbatch and layer changes): their
  own events and lanes, numbered in the new job. They are shown on their own, as extra rank groups
  with the measured ranks kept below for reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from app.view_model.lane_data import RowTable, drawable_events
from app.view_model.layer import IterationMark
from app.view_model.loaded_job import LoadedJob
from app.view_model.row_tables import RowTables
from lumos_core.api.scenarios import ScenarioSummary, traced_sources
from lumos_core.api.views import event_families, iteration_windows
from lumos_core.trace.model import RankTrace


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
    # aligned only: per measured rank, per predicted table index, how far (ms) the predicted task's
    # start or end is from the measured one's (None: no counterpart)
    deviation: list[np.ndarray | None] = field(default_factory=list)
    # separate only: the open job's ranks first, expanded (another measured job compared with it)
    measured_first: bool = False

    # match_within's answers by share (the first is computed on the worker that built the overlay)
    _match: dict[float, tuple[float, float] | None] = field(default_factory=dict, repr=False)

    def match_within(self, share: float = 0.99) -> tuple[float, float] | None:
        """(ms within which ``share`` of the drawn tasks' starts and ends match, the largest
        difference), over every rank; None when nothing can be compared."""
        if share in self._match:
            return self._match[share]
        dev = self.deviation
        per_rank = dev.of_events() if isinstance(dev, TaskDeviations) else list(dev)
        devs = [d for d in per_rank if d is not None and len(d)]
        got = None
        if devs:
            every = np.concatenate(devs)
            got = float(np.quantile(every, share)), float(every.max())
        self._match[share] = got
        return got


def stands_for_text(rank: int, ranks: list[int]) -> str:
    """ "rank 0", "rank 0 (= ranks 0, 8)", "rank 0 (= 64 ranks: 0, 8, 16, …)"."""
    if ranks == [rank]:
        return f"rank {rank}"
    if len(ranks) <= 4:
        return f"rank {rank} (= ranks {', '.join(map(str, ranks))})"
    return f"rank {rank} (= {len(ranks)} ranks: {', '.join(map(str, ranks[:3]))}, …)"


def predicted_header(rank: int, stands_for: list[int], traced: int) -> str:
    """The header of a predicted rank drawn on traced rank ``traced``'s rows: "rank 128 (= ranks 128,
    192) · from traced rank 64". The rows under it name the traced rank ("rank 64 ▸ stream 7"), so
    the header names it too whenever the predicted rank has another number."""
    text = stands_for_text(rank, stands_for)
    return text if rank == traced else f"{text} · from traced rank {traced}"


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
    families = list(loaded.families)
    present = [False] * n
    labels = [f"rank {t.rank} · not in the predicted job" for t in job.ranks]
    sim_rank = [-1] * n
    marks: list[list[IterationMark]] = [[] for _ in range(n)]
    for p, i in zip(timeline, sources):
        if present[i]:
            continue  # two predicted ranks from one traced rank: keep the first
        ranks[i] = p
        present[i] = True
        sim_rank[i] = p.rank
        labels[i] = f"{predicted_header(p.rank, summary.stands_for(p.rank), job.ranks[i].rank)} · predicted"
        marks[i] = _marks(p)
    # the predicted lanes' tables are built when they are shown, like the measured ones
    tables = RowTables(ranks, families, present=present)
    same = summary.world_size == n and all(summary.stands_for(r) == [r] for r in sim_rank if r >= 0)
    overlay = PredictedOverlay(
        ranks,
        tables,  # type: ignore[arg-type]
        families,
        present,
        labels,
        sim_rank,
        marks,
        summary.world_size,
        same,
        False,
        TaskDeviations(tables, job.ranks, present),  # type: ignore[arg-type]
    )
    overlay.match_within()  # here, on the worker: the GUI only reads it
    return overlay


class TaskDeviations(Sequence[np.ndarray | None]):
    """Per measured rank: :func:`task_deviation` of its predicted table, computed (and the table
    built) when first asked for; None where the predicted job has no counterpart."""

    def __init__(self, tables: RowTables, measured: list[RankTrace], present: list[bool]) -> None:
        self.tables, self.measured, self.present = tables, measured, present
        self._done: dict[int, np.ndarray | None] = {}

    def __len__(self) -> int:
        return len(self.present)

    def __getitem__(self, i: int) -> np.ndarray | None:  # type: ignore[override]
        if i not in self._done:
            ok = self.present[i]
            self._done[i] = task_deviation(self.tables[i], self.measured[i]) if ok else None
        return self._done[i]

    def of_events(self) -> list[np.ndarray | None]:
        """Every rank's deviations in event order (no table built): the same values per rank as
        ``self[i]``, in another order."""
        out: list[np.ndarray | None] = []
        for i, ok in enumerate(self.present):
            out.append(event_deviation(self.tables.ranks[i], self.measured[i]) if ok else None)
        return out


def task_deviation(table: RowTable, measured: RankTrace) -> np.ndarray | None:
    """For each task of a predicted rank's ``table``: the larger of |start - measured start| and
    |end - measured end|, in ms. The predicted rank has the measured rank's events (same indices);
    None when it does not."""
    ev = table.event
    if len(ev) and int(ev.max()) >= len(measured.start):
        return None
    start = measured.start[ev] / 1e6
    end = (measured.start[ev] + measured.dur[ev]) / 1e6
    return np.maximum(np.abs(table.start - start), np.abs(table.end - end))


def event_deviation(predicted: RankTrace, measured: RankTrace) -> np.ndarray | None:
    """:func:`task_deviation` of the rank's drawn tasks in event order, without its row table."""
    ev = drawable_events(predicted)
    if len(ev) and int(ev.max()) >= len(measured.start):
        return None
    p_start = predicted.start[ev] / 1e6
    p_end = (predicted.start[ev] + predicted.dur[ev]) / 1e6
    start = measured.start[ev] / 1e6
    end = (measured.start[ev] + measured.dur[ev]) / 1e6
    return np.maximum(np.abs(p_start - start), np.abs(p_end - end))


def format_small_ms(ms: float) -> str:
    """A duration that may be tiny: "0 ns", "380 ns", "6.8 µs", "1.25 ms"."""
    if ms < 1e-6:
        return "0 ns"
    if ms < 1e-3:
        return f"{ms * 1e6:.0f} ns"
    if ms < 1.0:
        return f"{ms * 1e3:.3g} µs"
    return f"{ms:.3g} ms"


def match_text(overlay: PredictedOverlay) -> str:
    """ "matches the measured timeline within 380 ns (99 % of tasks; max 6.8 µs)": how far the
    drawn tasks' starts and ends are from the measured ones (empty when they cannot be compared)."""
    got = overlay.match_within()
    if got is None:
        return ""
    p99, worst = got
    return (
        f"matches the measured timeline within {format_small_ms(p99)} "
        f"(99 % of tasks; max {format_small_ms(worst)})"
    )


def _separate(timeline: list[RankTrace], summary: ScenarioSummary) -> PredictedOverlay:
    ranks = sorted(timeline, key=lambda p: p.rank)
    families = [event_families(p) for p in ranks]
    tables = RowTables(ranks, families)  # built when shown, like the measured ones
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
    """Iteration marks of the measured ranks (as the timeline draws them): from the iteration
    windows found with the lanes, else from the iteration table."""
    if loaded.windows is not None:
        return [
            [IterationMark(w.name, w.start / 1e6, w.end / 1e6) for w in ws if w.name != "whole trace"]
            for ws in loaded.windows
        ]
    index = {t.rank: i for i, t in enumerate(loaded.job.ranks)}
    marks: list[list[IterationMark]] = [[] for _ in loaded.job.ranks]
    for it in loaded.iterations:
        if it.iteration == "whole trace":
            continue
        marks[index[it.rank]].append(
            IterationMark(it.iteration, it.start_ns / 1e6, (it.start_ns + it.dur_ns) / 1e6)
        )
    return marks


__all__ = [
    "PredictedOverlay",
    "TaskDeviations",
    "build_overlay",
    "event_deviation",
    "format_small_ms",
    "match_text",
    "measured_marks",
    "stands_for_text",
    "task_deviation",
]
