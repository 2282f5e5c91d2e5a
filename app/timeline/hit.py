"""What the pointer, the selection and the search point at: a task of one layer of one rank."""

from __future__ import annotations

from dataclasses import dataclass

MEASURED, PREDICTED = 0, 1  # layer indices


@dataclass(frozen=True)
class Hit:
    """A task on screen: rank index (into job.ranks), event index (into that rank's table) and
    layer: 0 the measured rank, 1 the predicted rank drawn in its rows (same event indices)."""

    rank_index: int
    event: int
    layer: int = MEASURED
