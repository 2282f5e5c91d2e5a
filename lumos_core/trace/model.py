"""The loaded job: columnar numpy data per rank.

A :class:`RankTrace` holds every timed ("X") event of one rank file in one table of numpy columns,
grouped by *lane* (a CPU thread or a GPU stream) and sorted by start time inside each lane, so a
lane's events are the contiguous slice ``lane_begin[l]:lane_begin[l + 1]``. Times are integer
nanoseconds on the job's common, clock-aligned time base (see :mod:`lumos_core.trace.clocks`); the raw
profiler time of an event is ``start + raw_shift_ns``. Names are interned: ``name`` holds indices
into ``strings``. Event arguments are kept as one orjson blob per event (``args_of(i)``), decoded
only when somebody looks at them; the hot ones (correlation, External id, collective metadata)
are columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import orjson

from lumos_core.os_memory import PAGE_OUT_ABOVE, drop_pages, mapping_of, page_out, page_out_except
from lumos_core.trace.memory import MemoryRecords

# More ranks than any job has: rank numbers and world sizes beyond it are corrupt metadata (ranks
# are stored as int32 in the graph).
MAX_RANKS = 1 << 24


class Kind(IntEnum):
    """What an event is. Several Kineto categories map to one kind (e.g. legacy ``Kernel``)."""

    CPU_OP = 0
    USER_ANNOTATION = 1
    PYTHON_FUNCTION = 2
    RUNTIME = 3  # cuda_runtime, cuda_driver, hip runtime, legacy Runtime
    KERNEL = 4
    MEMCPY = 5
    MEMSET = 6
    GPU_ANNOTATION = 7
    CUDA_SYNC = 8
    OTHER = 9


GPU_ACTIVITY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
CPU_TASK_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.RUNTIME)
CPU_LANE_KINDS = (*CPU_TASK_KINDS, Kind.OTHER)  # everything a CPU thread may hold
CPU_WORK_KINDS = (Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON_FUNCTION)  # CPU events that do work (no annotations)


class FlowKind(IntEnum):
    """What a flow event links."""

    LAUNCH = 0  # ac2g: a launch call and its GPU activity (legacy: "async" flows)
    FWDBWD = 1  # an autograd op and its backward
    OTHER = 2


class LaneRole(IntEnum):
    """What a lane does, for labels and colours. Streams get roles from what runs on them."""

    CPU_MAIN = 0
    CPU_AUTOGRAD = 1
    CPU_OTHER = 2
    COMPUTE = 3
    COMMUNICATION = 4
    MEMCPY = 5
    GPU_OTHER = 6

    @property
    def label(self) -> str:
        return _ROLE_LABELS[self]

    @property
    def is_gpu(self) -> bool:
        return self >= LaneRole.COMPUTE


_ROLE_LABELS = {
    LaneRole.CPU_MAIN: "main thread",
    LaneRole.CPU_AUTOGRAD: "autograd thread",
    LaneRole.CPU_OTHER: "thread",
    LaneRole.COMPUTE: "compute",
    LaneRole.COMMUNICATION: "communication",
    LaneRole.MEMCPY: "memcpy",
    LaneRole.GPU_OTHER: "gpu",
}


class CollectiveKind(IntEnum):
    """Collective operations, normalised from PyTorch's names and NCCL/RCCL kernel names."""

    UNKNOWN = 0
    ALL_REDUCE = 1
    ALL_GATHER = 2
    REDUCE_SCATTER = 3
    BROADCAST = 4
    REDUCE = 5
    ALL_TO_ALL = 6
    SEND = 7
    RECV = 8
    SEND_RECV = 9
    BARRIER = 10

    @property
    def label(self) -> str:
        return _COLL_LABELS[self]

    @property
    def is_p2p(self) -> bool:
        return self in (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV)


_COLL_LABELS = {
    CollectiveKind.UNKNOWN: "collective",
    CollectiveKind.ALL_REDUCE: "AllReduce",
    CollectiveKind.ALL_GATHER: "AllGather",
    CollectiveKind.REDUCE_SCATTER: "ReduceScatter",
    CollectiveKind.BROADCAST: "Broadcast",
    CollectiveKind.REDUCE: "Reduce",
    CollectiveKind.ALL_TO_ALL: "AllToAll",
    CollectiveKind.SEND: "Send",
    CollectiveKind.RECV: "Recv",
    CollectiveKind.SEND_RECV: "SendRecv",
    CollectiveKind.BARRIER: "Barrier",
}


@dataclass(slots=True)
class Lane:
    """One CPU thread or GPU stream of a rank. ``key`` is (pid, tid) as written in the trace."""

    index: int
    is_gpu: bool
    pid: int
    tid: int
    name: str  # thread name or "stream 7"
    role: LaneRole = LaneRole.CPU_OTHER
    device: int = -1  # GPU index for streams
    stream: int = -1  # CUDA stream id for streams

    @property
    def label(self) -> str:
        if self.is_gpu:
            return f"stream {self.stream} ({self.role.label})"
        return f"{self.name} ({self.role.label})" if self.name else f"thread {self.tid}"


@dataclass(slots=True)
class Iteration:
    """One profiler step. CPU bounds from ``ProfilerStep#N``; GPU bounds from its GPU twin or -1."""

    name: str
    step: int
    cpu_start: int
    cpu_end: int
    gpu_start: int = -1
    gpu_end: int = -1


@dataclass
class Collectives:
    """One row per communication GPU activity (NCCL/RCCL kernel) of a rank; columns.

    ``event`` indexes the rank's event table. ``pg`` is an interned process-group key (name, or
    the ranks list when no name is recorded). ``seq`` is PyTorch's sequence number or -1.
    ``source`` says where the metadata came from: 0 kernel args, 1 enclosing
    ``record_param_comms`` op, 2 kernel name only.
    """

    event: np.ndarray  # int32
    kind: np.ndarray  # int8 CollectiveKind
    in_nelems: np.ndarray  # int64, -1 unknown
    out_nelems: np.ndarray  # int64
    dtype_bytes: np.ndarray  # int8, 0 unknown
    pg: np.ndarray  # int32 string id, -1 unknown
    group_size: np.ndarray  # int32, -1 unknown
    group_ranks: np.ndarray  # int32 string id of "[0, 1, ...]", -1 unknown
    seq: np.ndarray  # int64, -1 unknown
    peer: np.ndarray  # int32 src/dst global rank for p2p, -1 unknown
    source: np.ndarray  # int8

    def __len__(self) -> int:
        return len(self.event)

    @property
    def size_bytes(self) -> np.ndarray:
        """Message size per rank as NCCL-tests count it (input for all ops but all-gather)."""
        nel = np.where(self.kind == CollectiveKind.ALL_GATHER, self.out_nelems, self.in_nelems)
        nel = np.where(nel < 0, np.maximum(self.in_nelems, self.out_nelems), nel)
        return np.where((nel >= 0) & (self.dtype_bytes > 0), nel * self.dtype_bytes, -1)

    @classmethod
    def empty(cls) -> Collectives:
        i32 = np.zeros(0, np.int32)
        i64 = np.zeros(0, np.int64)
        i8 = np.zeros(0, np.int8)
        return cls(i32, i8, i64, i64, i8, i32, i32, i32, i64, i32, i8)


COLLECTIVE_COLUMNS = (
    "event",
    "kind",
    "in_nelems",
    "out_nelems",
    "dtype_bytes",
    "pg",
    "group_size",
    "group_ranks",
    "seq",
    "peer",
    "source",
)


class CudaSyncKind(IntEnum):
    """What a ``cuda_sync`` event records (its ``cuda_sync_kind`` arg); the rest are ``OTHER``."""

    OTHER = 0
    STREAM_SYNC = 1  # "Stream Sync"
    STREAM_WAIT_EVENT = 2  # "Stream Wait Event"


@dataclass
class CudaSyncs:
    """One row per ``cuda_sync`` event of a rank: the args the graph's rules read, as columns.

    ``wait_stream`` is the ``wait_on_stream`` arg of a stream-wait-event, valid where
    ``wait_stream_known`` (absent or not a number: it names no stream); ``record_corr`` is
    ``wait_on_cuda_event_record_corr_id`` (-1 absent or not an integer)."""

    event: np.ndarray  # int32 event index
    kind: np.ndarray  # int8 CudaSyncKind
    wait_stream: np.ndarray  # int64
    wait_stream_known: np.ndarray  # bool
    record_corr: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.event)

    @classmethod
    def empty(cls) -> CudaSyncs:
        i64 = np.zeros(0, np.int64)
        return cls(np.zeros(0, np.int32), np.zeros(0, np.int8), i64, np.zeros(0, bool), i64)

    def check(self, n_events: int) -> None:
        """Raise ValueError unless the columns fit together and index events of the rank."""
        n = len(self.event)
        if any(getattr(self, c).ndim != 1 or len(getattr(self, c)) != n for c in CUDA_SYNC_COLUMNS) or (
            n and not 0 <= int(self.event.min()) <= int(self.event.max()) < n_events
        ):
            raise ValueError("inconsistent cuda_sync columns")


CUDA_SYNC_COLUMNS = ("event", "kind", "wait_stream", "wait_stream_known", "record_corr")


@dataclass
class RankTrace:
    """Everything Lumos keeps of one rank's trace file."""

    rank: int
    file: str
    rank_source: str  # "distributedInfo", "file name" or "file order"
    strings: list[str]
    lanes: list[Lane]
    # --- the event table, grouped by lane, sorted by (start, -dur) inside a lane ---
    kind: np.ndarray  # int8 Kind
    cat: np.ndarray  # int32 string id of the original category
    name: np.ndarray  # int32 string id
    lane: np.ndarray  # int32 lane index
    start: np.ndarray  # int64 ns, job time base
    dur: np.ndarray  # int64 ns (>= 0)
    correlation: np.ndarray  # int64, -1 none
    external_id: np.ndarray  # int64, -1 none
    depth: np.ndarray  # int16 nesting depth (CPU) or overlap sub-row (GPU) inside the lane
    parent: np.ndarray  # int32 enclosing event on the same lane, -1 top level
    launch: np.ndarray  # int32 for GPU activities: the runtime call that launched it, -1 unknown
    args_start: np.ndarray  # int64 offset of each event's args in args_data
    args_len: np.ndarray  # int32 length of each event's args (0: none)
    args_data: np.ndarray  # uint8 orjson bytes of the args, in file order
    lane_begin: np.ndarray  # int64 (n_lanes + 1)
    collectives: Collectives
    # --- flows (ac2g, fwdbwd): one row per flow endpoint ---
    flow_kind: np.ndarray  # int8 FlowKind
    flow_id: np.ndarray  # int64
    flow_phase: np.ndarray  # int8: 0 start ("s"), 1 finish ("f")
    flow_ts: np.ndarray  # int64 ns
    flow_event: np.ndarray  # int32 event the endpoint binds to, -1 unbound
    # --- instant events ---
    instant_name: np.ndarray  # int32 string id
    instant_ts: np.ndarray  # int64 ns
    iterations: list[Iteration]
    metadata: dict[str, Any]  # top-level keys except traceEvents (deviceProperties, distributedInfo, ...)
    raw_shift_ns: int = 0  # raw profiler time (ns, incl. baseTimeNanoseconds) = start + raw_shift_ns
    clock_offset_ns: int = 0  # correction applied by clock alignment (already included in start)
    warnings: list[str] = field(default_factory=list)
    # --- the profiler's memory records ([memory] events; empty without profile_memory=True) ---
    memory: MemoryRecords = field(default_factory=MemoryRecords.empty)
    # --- the args of its cuda_sync events the graph reads (None: not extracted, read from args) ---
    cuda_syncs: CudaSyncs | None = None

    # ---- sizes and lookups ----
    def __len__(self) -> int:
        return len(self.start)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    def lane_slice(self, lane: int) -> slice:
        return slice(int(self.lane_begin[lane]), int(self.lane_begin[lane + 1]))

    def name_of(self, i: int) -> str:
        return self.strings[int(self.name[i])]

    def args_of(self, i: int) -> dict[str, Any]:
        """Decode the args of event ``i`` (cheap; done on demand, never for every event)."""
        a = int(self.args_start[i])
        b = a + int(self.args_len[i])
        if a == b:
            return {}
        return orjson.loads(self.args_data[a:b].tobytes())  # type: ignore[no-any-return]

    def args_of_many(self, events: np.ndarray) -> list[dict[str, Any]]:
        """:meth:`args_of` for many events at once: one JSON parse of all their args."""
        events = np.asarray(events, np.int64)
        if len(events) == 0:
            return []
        data = memoryview(np.asarray(self.args_data))
        starts = np.asarray(self.args_start)[events].tolist()
        ends = (np.asarray(self.args_start)[events] + np.asarray(self.args_len)[events]).tolist()
        items = [data[a:b] if b > a else b"{}" for a, b in zip(starts, ends)]
        out = orjson.loads(b"[" + b",".join(items) + b"]")
        del items, data
        # a few args from every page keep the rank's whole args blob resident: let it go again
        drop_pages(self.args_data)
        return out  # type: ignore[no-any-return]

    def string_id(self, s: str) -> int:
        """Index of ``s`` in the string table, or -1 (linear; for occasional lookups only)."""
        try:
            return self.strings.index(s)
        except ValueError:
            return -1

    def names_matching(self, predicate: Any) -> np.ndarray:
        """Boolean mask over the string table of names for which ``predicate(name)`` is true."""
        # fromiter takes each result's truth value, as bool() would
        return np.fromiter(map(predicate, self.strings), bool, len(self.strings))

    def mask(self, *kinds: Kind) -> np.ndarray:
        return np.isin(self.kind, np.asarray(kinds, dtype=np.int8))

    def count(self, *kinds: Kind) -> int:
        return int(np.count_nonzero(self.mask(*kinds)))

    @property
    def device_name(self) -> str:
        props = self.metadata.get("deviceProperties") or []
        gpu_lanes = [ln for ln in self.lanes if ln.is_gpu]
        dev = gpu_lanes[0].device if gpu_lanes else 0
        for p in props:
            if isinstance(p, dict) and p.get("id") == dev and p.get("name"):
                return str(p["name"])
        if props and isinstance(props[0], dict) and props[0].get("name"):
            return str(props[0]["name"])
        return "CPU" if not gpu_lanes else "GPU"

    @property
    def world_size(self) -> int | None:
        info = self.metadata.get("distributedInfo") or {}
        ws = info.get("world_size") if isinstance(info, dict) else None
        # An implausible world size (corrupt metadata) is treated as not recorded: it would size
        # per-rank tables and lists of missing ranks.
        return int(ws) if isinstance(ws, int) and 0 < ws <= MAX_RANKS else None

    @property
    def is_synthetic(self) -> bool:
        return bool(self.metadata.get("lumos_synthetic"))

    def shift(self, delta_ns: int, in_place: bool = False) -> None:
        """Move every timestamp of this rank by ``delta_ns`` (used to put ranks on one time base).

        The time columns become new arrays, and the memory records and iteration windows new
        objects: a rank made from another with ``dataclasses.replace`` (a predicted timeline) shares
        them, and moving one must not move the other. ``in_place``: the caller made this rank and
        nothing else holds its columns (the loader): writable columns are then moved where they are,
        without a copy of each (a column of the cache's read-only mapping is still copied)."""
        if delta_ns == 0:
            return
        self.start = _shifted(self.start, delta_ns, in_place)
        self.flow_ts = _shifted(self.flow_ts, delta_ns, in_place)
        self.instant_ts = _shifted(self.instant_ts, delta_ns, in_place)
        ts = _shifted(self.memory.ts, delta_ns, in_place)
        self.memory = self.memory if in_place else dataclasses.replace(self.memory)
        self.memory.ts = ts
        if not in_place:
            self.iterations = [dataclasses.replace(it) for it in self.iterations]
        for it in self.iterations:
            it.cpu_start += delta_ns
            it.cpu_end += delta_ns
            if it.gpu_start >= 0:
                it.gpu_start += delta_ns
                it.gpu_end += delta_ns
        self.raw_shift_ns -= delta_ns

    def release_pages(self, keep: Collection[str] = ()) -> None:
        """Hand the resident pages of the columns mapped from the cache back to the operating
        system, except those of the columns named in ``keep`` (``"collectives"``: all of its).
        Nothing changes: a column read again is paged in from the cache file. Call it when done
        with a rank's columns for a while; a no-op for a rank parsed in memory."""
        page_out_except(self.kind, self._arrays(keep))  # the columns' mapping
        if "args_data" not in keep:
            page_out(mapping_of(self.args_data))  # the args' own

    def release_replaced_pages(self) -> None:
        """Hand back the mapped pages no column views any more (the cache's time columns once
        :meth:`shift` has made new ones), keeping every column's."""
        page_out_except(self.kind, self._arrays(vars(self)))

    def _arrays(self, names: Collection[str]) -> list[np.ndarray]:
        """The arrays of the named fields; a group of columns (collectives, cuda_syncs, memory)
        gives all of its."""
        out: list[np.ndarray] = []
        for name in names:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                out.append(value)
            elif dataclasses.is_dataclass(value):
                out.extend(v for v in vars(value).values() if isinstance(v, np.ndarray))
        return out

    @property
    def first_start(self) -> int:
        """First start over all events (0 when empty): ``span[0]`` without reading the durations."""
        return int(self.start.min()) if len(self.start) else 0

    @property
    def span(self) -> tuple[int, int]:
        """First start and last end over all events (0, 0 when empty)."""
        if len(self.start) == 0:
            return (0, 0)
        return int(self.start.min()), int((self.start + self.dur).max())


def _shifted(times: np.ndarray, delta_ns: int, in_place: bool) -> np.ndarray:
    """``times + delta_ns``: in place where asked and possible, else a new array (always for a view of
    the cache file's mapping, which is read-only: see ``trace/cache.py``)."""
    if not in_place or not times.flags.writeable or mapping_of(times) is not None:
        return times + delta_ns
    times += delta_ns
    return times


@dataclass
class SkippedFile:
    """A file of the folder that could not be loaded, and why."""

    file: str
    reason: str

    @property
    def not_a_trace(self) -> bool:
        """Valid JSON but no Kineto trace (a run's config.json beside its traces): worth a note,
        not a warning that a rank was lost."""
        return self.reason.startswith("JSON but not a Kineto trace")


@dataclass
class Job:
    """All ranks of one training job on a common, clock-aligned time base (ns from ``origin_ns``)."""

    path: str
    ranks: list[RankTrace]
    rank_rule: str  # how ranks were numbered, for the user
    origin_ns: int  # raw profiler time (ns) of the job's time zero, before alignment corrections
    skipped: list[SkippedFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    alignment: dict[str, Any] = field(default_factory=dict)
    collective_match: Any = None  # lumos_core.trace.collectives.CollectiveMatch, set by the loader

    def rank(self, r: int) -> RankTrace:
        for t in self.ranks:
            if t.rank == r:
                return t
        raise KeyError(f"rank {r} is not in {self.path}")

    @property
    def world_size(self) -> int:
        sizes = [t.world_size for t in self.ranks if t.world_size]
        return max(sizes) if sizes else len(self.ranks)

    @property
    def n_events(self) -> int:
        return sum(len(t) for t in self.ranks)

    @property
    def is_synthetic(self) -> bool:
        return any(t.is_synthetic for t in self.ranks)

    def pages_worth_releasing(self) -> bool:
        """Whether steps done with the ranks' columns should hand their mapped pages back
        (:meth:`RankTrace.release_pages`): only for a job whose mapped cache is big."""
        mapped = 0
        for t in self.ranks:
            m = mapping_of(t.kind)
            mapped += len(m) if m is not None else 0
        return mapped > PAGE_OUT_ABOVE

    @property
    def span(self) -> tuple[int, int]:
        spans = [t.span for t in self.ranks if len(t)]
        if not spans:
            return (0, 0)
        return min(s[0] for s in spans), max(s[1] for s in spans)
