"""What the ``cuda_sync`` events of a rank (``enable_cuda_sync_events=True``) say, for the rules that
read them (stream synchronize and stream-wait-event pairing): from the rank's cuda_sync columns,
extracted when it was parsed (no per-event JSON is decoded here)."""

from __future__ import annotations

import numpy as np

from lumos_core.trace.cuda_sync_args import cuda_syncs_of
from lumos_core.trace.model import CudaSyncKind, RankTrace


def stream_sync_lanes(t: RankTrace) -> dict[int, int]:
    """correlation of a cudaStreamSynchronize -> its stream's lane ("Stream Sync" events; the last
    one wins where a correlation repeats)."""
    s = cuda_syncs_of(t)
    ev = s.event[s.kind == CudaSyncKind.STREAM_SYNC]
    return dict(zip(t.correlation[ev].tolist(), t.lane[ev].tolist()))


def stream_wait_targets(t: RankTrace) -> dict[int, tuple[int, int, int]]:
    """correlation of cudaStreamWaitEvent -> (waiting lane, recorded lane or -1, record correlation),
    from "Stream Wait Event" events (the last one wins where a correlation repeats)."""
    s = cuda_syncs_of(t)
    rows = np.flatnonzero(s.kind == CudaSyncKind.STREAM_WAIT_EVENT)
    if len(rows) == 0:
        return {}
    ev = s.event[rows]
    lane = t.lane[ev]
    device = np.asarray([ln.device for ln in t.lanes], np.int64)[lane]
    stream, known = s.wait_stream[rows], s.wait_stream_known[rows]
    src = np.full(len(rows), -1, np.int64)
    # the stream waited on is the GPU lane of the same device with that stream id (the last such
    # lane where two share the ids, as a dict keyed by them would keep)
    lane_of_stream = {(ln.device, ln.stream): ln.index for ln in t.lanes if ln.is_gpu}
    for (dev, st), idx in lane_of_stream.items():
        src[known & (device == dev) & (stream == st)] = idx
    triples = zip(lane.tolist(), src.tolist(), s.record_corr[rows].tolist())
    return dict(zip(t.correlation[ev].tolist(), triples))
