"""The args of ``cuda_sync`` events (``enable_cuda_sync_events=True``) that the graph's rules read,
as columns (:class:`~lumos_core.trace.model.CudaSyncs`): decoded once when a rank is parsed and kept
in the cache, so building a graph never decodes per-event JSON."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lumos_core.trace.model import CudaSyncKind, CudaSyncs, Kind, RankTrace

_I64 = 2**63
_KINDS = {"Stream Sync": CudaSyncKind.STREAM_SYNC, "Stream Wait Event": CudaSyncKind.STREAM_WAIT_EVENT}


def _stream(v: Any) -> int | None:
    """``wait_on_stream`` as the int64 stream id it equals, or None when it equals none (a stream id
    from the trace is an int64; an integral float names the same stream, as in a dict lookup)."""
    if isinstance(v, int):  # bool included: True == 1
        return int(v) if -_I64 <= v < _I64 else None
    if type(v) is float and math.isfinite(v) and v == int(v) and -_I64 <= v < _I64:
        return int(v)
    return None


def _record(v: Any) -> int:
    return int(v) if isinstance(v, int) and -_I64 <= v < _I64 else -1


def extract_cuda_syncs(rank: RankTrace) -> CudaSyncs:
    """Every ``cuda_sync`` event of ``rank`` with the args the rules read (one JSON parse of theirs)."""
    ev = np.flatnonzero(rank.kind == Kind.CUDA_SYNC)
    if len(ev) == 0:
        return CudaSyncs.empty()
    args = rank.args_of_many(ev)
    n = len(ev)
    kind = np.zeros(n, np.int8)
    wait_stream = np.zeros(n, np.int64)
    known = np.zeros(n, bool)
    record = np.full(n, -1, np.int64)
    for i, a in enumerate(args):
        v = a.get("cuda_sync_kind") if type(a) is dict else None
        k = _KINDS.get(v) if type(v) is str else None
        if k is None:
            continue
        kind[i] = k
        if k == CudaSyncKind.STREAM_WAIT_EVENT:
            s = _stream(a.get("wait_on_stream"))
            if s is not None:
                wait_stream[i], known[i] = s, True
            record[i] = _record(a.get("wait_on_cuda_event_record_corr_id", -1))
    return CudaSyncs(ev.astype(np.int32), kind, wait_stream, known, record)


def cuda_syncs_of(rank: RankTrace) -> CudaSyncs:
    """The rank's cuda_sync columns: extracted at parse time, else (a rank built elsewhere, e.g. a
    predicted timeline) decoded from the args now and kept."""
    if rank.cuda_syncs is None:
        rank.cuda_syncs = extract_cuda_syncs(rank)
    return rank.cuda_syncs
