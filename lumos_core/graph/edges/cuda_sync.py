"""The ``cuda_sync`` events of a rank (``enable_cuda_sync_events=True``), decoded once per rank for
the rules that read them (stream synchronize and stream-wait-event pairing)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.trace.model import Kind, RankTrace


@dataclass
class CudaSyncEvents:
    event: np.ndarray  # event index of each cuda_sync event
    lane: list[int]
    correlation: list[int]
    args: list[dict]


_last: tuple[RankTrace, CudaSyncEvents] | None = None  # the last trace asked about, decoded


def cuda_sync_events(t: RankTrace) -> CudaSyncEvents:
    """Every cuda_sync event with its lane, correlation and args (the last rank's are kept, since
    two rules of the same rank ask in a row)."""
    global _last
    if _last is not None and _last[0] is t:
        return _last[1]
    ev = np.flatnonzero(t.kind == Kind.CUDA_SYNC)
    out = CudaSyncEvents(ev, t.lane[ev].tolist(), t.correlation[ev].tolist(), t.args_of_many(ev))
    _last = (t, out)
    return out
