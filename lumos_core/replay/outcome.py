"""A run's result in one type: iteration time, breakdown and per-rank iteration times, for a
measured job, its replay or a what-if prediction (see :data:`~lumos_core.replay.breakdown.
ITERATION_DEFINITION`: the mean over steady-state iterations)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.replay.breakdown import Breakdown, Window, activity, breakdowns, steady_windows
from lumos_core.trace.model import RankTrace


@dataclass
class Outcome:
    """Iteration time and breakdown of one configuration (measured, replayed or predicted).

    ``config`` is the what-if configuration it belongs to (a ``JobConfig``), None for a replay."""

    config: Any
    iteration_us: float
    breakdown: Breakdown
    per_rank_us: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {} if self.config is None else {"config": self.config.as_dict()}
        d.update(
            {
                "iteration_us": round(self.iteration_us, 3),
                "breakdown": self.breakdown.as_us(),
                "per_rank_iteration_us": {r: round(v, 3) for r, v in self.per_rank_us.items()},
            }
        )
        return d


def outcome_of(config: Any, ranks: list[RankTrace]) -> Outcome:
    """Mean steady-state iteration time over the ranks, and the mean breakdown of their windows."""
    rows = []
    for t in ranks:
        windows = steady_windows(t)
        rows.append((t.rank, windows, breakdowns(*activity(t), windows) if windows else []))
    return outcome_from(config, rows)


def outcome_from(config: Any, rows: list[tuple[int, list[Window], list[Breakdown]]]) -> Outcome:
    """:func:`outcome_of` from each rank's steady-state windows and their breakdowns, for a caller
    that has computed them already: (rank, windows, breakdowns) per rank, in the job's rank order."""
    per_rank: dict[int, float] = {}
    parts = np.zeros(4)
    n = 0
    for rank, windows, bds in rows:
        if not windows:
            continue
        lengths = [w.length for w in windows]
        per_rank[rank] = float(np.mean(lengths)) / 1000
        for b in bds:
            parts += (b.exposed_compute_ns, b.overlapped_ns, b.exposed_comm_ns, b.other_ns)
            n += 1
    if n == 0:
        return Outcome(config, 0.0, Breakdown(0, 0, 0, 0), per_rank)
    parts /= n
    bd = Breakdown(*(int(round(x)) for x in parts))
    return Outcome(config, float(np.mean(list(per_rank.values()))), bd, per_rank)
