"""The profiler's memory records (``[memory]`` instant events) as columns.

``torch.profiler.profile(profile_memory=True)`` writes one ``[memory]`` instant event per
allocation and per free, on the thread that made it, with the allocator's running totals after
it: ``Total Allocated`` (bytes in live tensors) and ``Total Reserved`` (bytes the CUDA caching
allocator holds from the driver; 0 on CPU), the change (``Bytes``, negative for a free), the
address and the device (``Device Type`` 0 = CPU, 1 = CUDA; ``Device Id``).

What the totals count depends on the device. CUDA: the caching allocator's own counters, i.e.
every tensor on that GPU whenever it was allocated. CPU: PyTorch's CPU allocator reports to the
profiler only tensors allocated while memory profiling is on, so tensors made before the profiler
started (weights and optimizer states of a warmed-up run) are in neither the totals nor the frees.

:class:`MemoryColumns` collects the events while a file is read; :class:`MemoryRecords` is what a
:class:`~lumos_core.trace.model.RankTrace` keeps (``rank.memory``), sorted by time, with ``op`` the
innermost CPU event on the same thread that encloses the record (the operator that allocated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DEVICE_CPU",
    "DEVICE_CUDA",
    "MEMORY_COLUMNS",
    "MEMORY_EVENT_NAME",
    "MemoryColumns",
    "MemoryRecords",
    "device_label",
]

MEMORY_EVENT_NAME = "[memory]"
DEVICE_CPU = 0
DEVICE_CUDA = 1
_I64 = 2**63

MEMORY_COLUMNS = ("ts", "allocated", "reserved", "delta", "device_type", "device_id", "lane", "op", "addr")


def device_label(device_type: int, device_id: int) -> str:
    """ "CPU", "CUDA 0" or "device type 8 #1" (other accelerators: MPS, XPU, ...)."""
    if device_type == DEVICE_CPU:
        return "CPU"
    if device_type == DEVICE_CUDA:
        return f"CUDA {max(device_id, 0)}"
    return f"device type {device_type} #{device_id}"


@dataclass
class MemoryRecords:
    """One row per ``[memory]`` event of a rank, sorted by time (ns on the rank's time base)."""

    ts: np.ndarray  # int64 ns
    allocated: np.ndarray  # int64 bytes: Total Allocated after this record
    reserved: np.ndarray  # int64 bytes: Total Reserved after this record (0 on CPU)
    delta: np.ndarray  # int64 bytes: + allocation, - free
    device_type: np.ndarray  # int8: 0 CPU, 1 CUDA, other values as written
    device_id: np.ndarray  # int16 (-1 on CPU)
    lane: np.ndarray  # int32 CPU lane of the thread that allocated, -1 when it has no events
    op: np.ndarray  # int32 innermost enclosing event on that lane, -1 none
    addr: np.ndarray  # int64 address (for matching an allocation with its free), -1 unknown

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def empty(cls) -> MemoryRecords:
        i64 = np.zeros(0, np.int64)
        return cls(i64, i64, i64, i64, np.zeros(0, np.int8), np.zeros(0, np.int16),
                   np.zeros(0, np.int32), np.zeros(0, np.int32), i64)  # fmt: skip

    def devices(self) -> list[tuple[int, int]]:
        """(device type, device id) pairs present, CUDA devices first."""
        if not len(self.ts):
            return []
        pairs = np.unique(
            np.stack([self.device_type.astype(np.int64), self.device_id.astype(np.int64)]), axis=1
        )
        out = [(int(a), int(b)) for a, b in pairs.T]
        return sorted(out, key=lambda p: (p[0] != DEVICE_CUDA, p))

    def of_device(self, device_type: int, device_id: int) -> np.ndarray:
        """Row indices of one device, in time order."""
        return np.flatnonzero((self.device_type == device_type) & (self.device_id == device_id))

    def check(self) -> None:
        """Raise ValueError unless every column has the same length (a cache entry from elsewhere)."""
        n = len(self.ts)
        if any(getattr(self, c).ndim != 1 or len(getattr(self, c)) != n for c in MEMORY_COLUMNS):
            raise ValueError("inconsistent memory columns")


def _int(v: Any, default: int) -> int:
    t = type(v)
    if t is int and -_I64 <= v < _I64:
        return v  # type: ignore[no-any-return]
    if t is float and v == v and abs(v) < 2**63:
        return int(v)
    return default


class MemoryColumns:
    """Memory events gathered while a trace file is read (kept apart from other instant events)."""

    def __init__(self) -> None:
        self.ts: list[Any] = []
        self.allocated: list[int] = []
        self.reserved: list[int] = []
        self.delta: list[int] = []
        self.device_type: list[int] = []
        self.device_id: list[int] = []
        self.thread: list[tuple[bool, Any, Any]] = []
        self.addr: list[int] = []
        self.skipped = 0

    def add(self, ts: Any, event: dict[str, Any]) -> None:
        """One ``[memory]`` event whose ``ts`` (µs) was already read as a number."""
        args = event.get("args")
        if type(args) is not dict:
            self.skipped += 1
            return
        allocated = _int(args.get("Total Allocated"), -1)
        if allocated < 0:
            self.skipped += 1
            return
        key = (False, event.get("pid"), event.get("tid"))
        hash(key)  # an unhashable pid/tid is a malformed event: the reader skips it
        self.ts.append(ts)
        self.allocated.append(allocated)
        self.reserved.append(max(_int(args.get("Total Reserved"), 0), 0))
        self.delta.append(_int(args.get("Bytes"), 0))
        self.device_type.append(min(max(_int(args.get("Device Type"), -1), -128), 127))
        self.device_id.append(min(max(_int(args.get("Device Id"), -1), -32768), 32767))
        self.thread.append(key)
        self.addr.append(_int(args.get("Addr"), -1))

    def build(
        self,
        base_us: int,
        lane_ids: dict[tuple[bool, Any, Any], int],
        start: np.ndarray,
        dur: np.ndarray,
        lane: np.ndarray,
        lane_begin: np.ndarray,
        parent: np.ndarray,
        max_span_us: float,
        warnings: list[str],
    ) -> MemoryRecords:
        """Columns in time order; ``start``/``dur``/``lane``/``parent`` are the rank's sorted events."""
        if self.skipped:
            warnings.append(f"skipped {self.skipped} [memory] events without a readable Total Allocated")
        if not self.ts:
            return MemoryRecords.empty()
        ts_us = np.asarray(self.ts, np.float64)
        keep = np.abs(ts_us - base_us) < max_span_us
        if not keep.all():
            warnings.append(f"skipped {int((~keep).sum())} [memory] events with implausible timestamps")
        idx = np.flatnonzero(keep)
        ts_vals = [self.ts[i] for i in idx.tolist()]
        if all(type(v) is int for v in ts_vals):
            ts = np.asarray([v - base_us for v in ts_vals], np.int64) * 1000
        else:
            ts = np.rint((np.asarray(ts_vals, np.float64) - float(base_us)) * 1000.0).astype(np.int64)
        lanes = np.asarray([lane_ids.get(self.thread[i], -1) for i in idx.tolist()], np.int32)
        # Stable sort: records at the same ns keep file order (an allocation before its free).
        order = np.argsort(ts, kind="stable")
        cols = MemoryRecords(
            ts=ts[order],
            allocated=np.asarray(self.allocated, np.int64)[idx][order],
            reserved=np.asarray(self.reserved, np.int64)[idx][order],
            delta=np.asarray(self.delta, np.int64)[idx][order],
            device_type=np.asarray(self.device_type, np.int8)[idx][order],
            device_id=np.asarray(self.device_id, np.int16)[idx][order],
            lane=lanes[order],
            op=np.full(len(order), -1, np.int32),
            addr=np.asarray(self.addr, np.int64)[idx][order],
        )
        cols.op = enclosing_events(cols.ts, cols.lane, start, dur, lane_begin, parent)
        return cols


def enclosing_events(
    ts: np.ndarray,
    lanes: np.ndarray,
    start: np.ndarray,
    dur: np.ndarray,
    lane_begin: np.ndarray,
    parent: np.ndarray,
) -> np.ndarray:
    """For each time ``ts[i]`` on lane ``lanes[i]``: the innermost event there that encloses it, or -1.

    Events of a lane are sorted by (start, -dur), so the last one starting at or before ``ts`` is
    the innermost candidate; if it has already ended, its enclosing events (``parent``) are tried
    outward. Vectorised over records, one step per nesting level."""
    out = np.full(len(ts), -1, np.int32)
    if not len(ts) or not len(start):
        return out
    end = start + dur
    for ln in np.unique(lanes[lanes >= 0]).tolist():
        rows = np.flatnonzero(lanes == ln)
        a, b = int(lane_begin[ln]), int(lane_begin[ln + 1])
        if a == b:
            continue
        cand = np.searchsorted(start[a:b], ts[rows], side="right") - 1 + a
        cand = np.where(cand >= a, cand, -1)
        for _ in range(64):  # deeper nesting than this does not occur in real traces
            open_ = cand >= 0
            stale = open_ & (end[np.maximum(cand, 0)] < ts[rows])
            if not stale.any():
                break
            cand = np.where(stale, parent[np.maximum(cand, 0)], cand)
        out[rows] = cand
    return out
