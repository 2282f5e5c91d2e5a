"""What the ``cuda_sync`` events of a rank (``enable_cuda_sync_events=True``) say, for the rules that
read them (stream synchronize and stream-wait-event pairing): from the rank's cuda_sync columns,
extracted when it was parsed (no per-event JSON is decoded here)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.trace.cuda_sync_args import cuda_syncs_of
from lumos_core.trace.model import CudaSyncKind, RankTrace


def last_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, position in ``keys`` of the last occurrence of each): what a dict
    filled from ``keys`` in order would hold."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    last = np.ones(len(k), bool)
    last[:-1] = k[1:] != k[:-1]
    return k[last], order[last]


def find_sorted(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Position of each of ``wanted`` in the sorted distinct ``keys``, -1 where absent."""
    if len(keys) == 0:
        return np.full(len(wanted), -1, np.int64)
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[pos] == wanted, pos, -1)


def stream_sync_lanes(t: RankTrace) -> dict[int, int]:
    """correlation of a cudaStreamSynchronize -> its stream's lane ("Stream Sync" events; the last
    one wins where a correlation repeats)."""
    s = cuda_syncs_of(t)
    ev = s.event[s.kind == CudaSyncKind.STREAM_SYNC]
    return dict(zip(t.correlation[ev].tolist(), t.lane[ev].tolist()))


@dataclass
class StreamWaits:
    """The "Stream Wait Event" events of a rank, one row per correlation id (the last event where
    one repeats), sorted by it."""

    corr: np.ndarray  # int64 correlation of the cudaStreamWaitEvent call
    dest: np.ndarray  # int64 waiting lane
    src: np.ndarray  # int64 lane of the stream waited on, -1 when no lane of the trace is it
    record_corr: np.ndarray  # int64 correlation of the cudaEventRecord, -1 unknown

    def find(self, corr: np.ndarray) -> np.ndarray:
        """Row of each correlation id, -1 where no wait event has it."""
        return find_sorted(self.corr, np.asarray(corr, np.int64))

    def as_dict(self) -> dict[int, tuple[int, int, int]]:
        rows = zip(self.dest.tolist(), self.src.tolist(), self.record_corr.tolist())
        return dict(zip(self.corr.tolist(), rows))


def stream_waits(t: RankTrace) -> StreamWaits:
    """The rank's stream-wait-event targets (:class:`StreamWaits`)."""
    s = cuda_syncs_of(t)
    rows = np.flatnonzero(s.kind == CudaSyncKind.STREAM_WAIT_EVENT)
    ev = s.event[rows]
    corr, last = last_by_key(t.correlation[ev])
    rows, ev = rows[last], ev[last]
    lane = t.lane[ev].astype(np.int64)
    src = np.full(len(rows), -1, np.int64)
    if len(rows):
        device = np.asarray([ln.device for ln in t.lanes], np.int64)[lane]
        stream, known = s.wait_stream[rows], s.wait_stream_known[rows]
        # the stream waited on is the GPU lane of the same device with that stream id (the last
        # such lane where two share the ids, as a dict keyed by them would keep)
        lane_of_stream = {(ln.device, ln.stream): ln.index for ln in t.lanes if ln.is_gpu}
        for (dev, st), idx in lane_of_stream.items():
            src[known & (device == dev) & (stream == st)] = idx
    return StreamWaits(corr.astype(np.int64), lane, src, s.record_corr[rows].astype(np.int64))


def stream_wait_targets(t: RankTrace) -> dict[int, tuple[int, int, int]]:
    """correlation of cudaStreamWaitEvent -> (waiting lane, recorded lane or -1, record correlation)."""
    return stream_waits(t).as_dict()
