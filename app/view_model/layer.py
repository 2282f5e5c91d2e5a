"""What the timeline draws in each row: layers (per-rank row tables, measured or predicted, each with
a style) and the iteration marks of every rank."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.view_model.lane_data import RowTable
from lumos_core.trace.model import RankTrace


@dataclass(frozen=True)
class LayerStyle:
    """How a layer sits in its row: vertical band (fractions of the row), opacity, outline only."""

    y0: float = 0.1
    height: float = 0.8
    opacity: float = 1.0
    outline: bool = False
    labels: bool = True
    color: str | None = None  # one colour for every span (a ghost), instead of the family colours
    # draw only the spans that moved at least this many device pixels from where they were measured
    # (Layer.deviation); 0 draws every span
    min_diff_px: float = 0.0


@dataclass
class Layer:
    """A set of per-rank row tables drawn into the shared layout (measured, or later predicted)."""

    name: str
    ranks: list[RankTrace]
    tables: list[RowTable]
    style: LayerStyle = field(default_factory=LayerStyle)
    # per rank, per table index: how far (ms) the span's start or end is from the measured task's
    # (a predicted layer on the traced ranks); None where unknown
    deviation: list[np.ndarray | None] | None = None


@dataclass
class IterationMark:
    name: str
    start_ms: float
    end_ms: float
