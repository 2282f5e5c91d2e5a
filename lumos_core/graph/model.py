"""The execution graph (paper §3.3): tasks on processors (CPU threads, GPU streams) and the
dependencies between them, built from a loaded :class:`~lumos_core.trace.model.Job`.

Tasks
    CPU tasks are the *leaf* CPU events of each thread (operators without children and runtime
    calls): their sequence is the thread's program order, and the time between them is CPU work,
    kept as measured. Parent operators and annotations are not tasks; the replay maps their times
    through the tasks they contain. GPU tasks are kernels, memcpy and memset on their stream.

Dependencies (:class:`EdgeKind`)
    ``CPU_THREAD``      consecutive tasks of a thread (lag = the measured CPU time between them)
    ``CPU_CROSS``       a thread resuming after another thread's work (e.g. the autograd thread
                        starting once the forward pass has called backward): a gap on one thread
                        that ends shortly after a task on another thread ended
    ``LAUNCH``          runtime call -> the GPU activity with its correlation id
    ``SYNC``            GPU -> CPU: a stream/device/event synchronize (or blocking copy) cannot
                        *end* before the GPU work it waits for has ended
    ``STREAM``          consecutive activities of a stream
    ``EVENT_WAIT``      cudaEventRecord on one stream -> cudaStreamWaitEvent on another (exact with
                        ``cuda_sync`` events, otherwise inferred from the launch order)
    ``COLLECTIVE``      every rank's kernel of a collective instance waits for all of them to arrive;
                        the transfer itself then takes the instance's measured transfer time
    ``P2P``             the same for send/recv pairs
    ``LAUNCH_QUEUE``    GPU -> CPU: a launch call cannot return while the device already holds its
                        limit of launched-but-not-started work (~1024 entries): when the GPU falls
                        behind, the CPU is throttled
    ``GRAPH``           GPU -> GPU inside one CUDA graph launch: a graph kernel that waited for the
                        graph's kernel on another stream (graph edges are not in the trace)

Each family is inferred by one module of :mod:`lumos_core.graph.edges`; :mod:`lumos_core.graph.build`
assembles the graph, :mod:`~lumos_core.graph.calibrate` fits the lags, :mod:`~lumos_core.graph.order`
orders the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum

import numpy as np

from lumos_core.trace.model import Job

NO_ANCHOR = np.iinfo(np.int64).min // 4  # anchor of a node that only its dependencies place


class EdgeKind(IntEnum):
    CPU_THREAD = 0
    CPU_CROSS = 1
    LAUNCH = 2
    SYNC = 3
    STREAM = 4
    EVENT_WAIT = 5
    COLLECTIVE = 6
    P2P = 7
    LAUNCH_QUEUE = 8
    GRAPH = 9

    @property
    def label(self) -> str:
        return _EDGE_LABELS[self]


_EDGE_LABELS = {
    EdgeKind.CPU_THREAD: "CPU->CPU same thread",
    EdgeKind.CPU_CROSS: "CPU->CPU across threads",
    EdgeKind.LAUNCH: "CPU->GPU launch",
    EdgeKind.SYNC: "GPU->CPU sync",
    EdgeKind.STREAM: "GPU->GPU same stream",
    EdgeKind.EVENT_WAIT: "GPU->GPU across streams (event)",
    EdgeKind.COLLECTIVE: "rank<->rank collective",
    EdgeKind.P2P: "rank<->rank send/recv",
    EdgeKind.LAUNCH_QUEUE: "GPU->CPU launch queue full",
    EdgeKind.GRAPH: "GPU->GPU inside a CUDA graph",
}


class NodeType(IntEnum):
    CPU = 0
    GPU = 1
    ARRIVE = 2  # a collective kernel's start on its stream (waits for its own dependencies)
    JOIN = 3  # a collective instance: starts when every participant has arrived


class GraphOrigin(Enum):
    """Where a graph's tasks come from."""

    TRACED = "traced"  # built from a trace: every node has its measured start and end
    REBUILT = "rebuilt"  # rebuilt by a what-if (new pipeline, microbatches, layers): never measured


@dataclass
class ExecutionGraph:
    """Nodes and dependencies as columns. Node ids are global over the job.

    Start dependencies ``sp_*`` (CSR by destination): ``start[v] >= (end|start)[src] + lag``.
    End dependencies ``ep_*`` (CSR by destination): ``end[v] >= end[src] + lag`` (blocking calls).

    Made by :func:`lumos_core.graph.factory.make_graph`. ``measured_start``/``measured_end`` are
    None for a rebuilt graph (``origin`` REBUILT): its tasks never ran, and the source events they
    were copied from (``rank``/``event``) are the only measured times there are.
    """

    job: Job
    rank: np.ndarray  # int32 rank number per node
    event: np.ndarray  # int32 event index in the rank's table (-1 for JOIN nodes)
    node_type: np.ndarray  # int8 NodeType
    proc: np.ndarray  # int32 processor (index into procs), -1 for JOIN
    dur: np.ndarray  # int64 ns
    anchor: np.ndarray  # int64 earliest start (the measured start of a task nothing precedes)
    measured_start: np.ndarray | None  # int64 ns per node; None for a rebuilt graph
    measured_end: np.ndarray | None
    sp_ptr: np.ndarray  # CSR offsets: int32 while the edges fit (graph.order.narrow_ptr), else int64
    sp_src: np.ndarray
    sp_lag: np.ndarray
    sp_from_end: np.ndarray  # bool: depends on the source's end (else its start)
    sp_kind: np.ndarray  # int8 EdgeKind
    ep_ptr: np.ndarray  # as sp_ptr
    ep_src: np.ndarray
    ep_lag: np.ndarray
    ep_from_end: np.ndarray  # bool: the source's end (else its start)
    ep_kind: np.ndarray
    order: np.ndarray  # a topological order of the nodes
    procs: list[tuple[int, int]]  # (rank, lane) per processor
    arrive_of: np.ndarray  # int32: for a collective's transfer node, its ARRIVE node, else -1
    origin: GraphOrigin
    rank_nodes: dict[int, np.ndarray] = field(default_factory=dict)  # rank -> task node per event (-1)
    unexplained_ns: int = 0
    notes: list[str] = field(default_factory=list)

    def measured(self) -> tuple[np.ndarray, np.ndarray]:
        """Measured (start, end) of every node; a rebuilt graph has none and says so."""
        if self.measured_start is None or self.measured_end is None:
            raise ValueError(f"a {self.origin.value} execution graph has no measured times")
        return self.measured_start, self.measured_end

    @property
    def n_nodes(self) -> int:
        return len(self.dur)

    @property
    def n_tasks(self) -> int:
        """CPU and GPU tasks (virtual collective nodes not counted)."""
        return int(np.count_nonzero(self.node_type <= NodeType.GPU))

    def edge_counts(self) -> dict[str, int]:
        """Dependencies per kind; a collective counts one edge per participating kernel."""
        counts = np.bincount(self.sp_kind, minlength=len(EdgeKind)) + np.bincount(
            self.ep_kind, minlength=len(EdgeKind)
        )
        from_join = self.node_type[self.sp_src] == NodeType.JOIN  # join -> transfer halves
        counts = counts - np.bincount(self.sp_kind[from_join], minlength=len(EdgeKind))
        return {k.name.lower(): int(counts[k]) for k in EdgeKind}

    @property
    def sp_dst(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_nodes, dtype=np.int32), np.diff(self.sp_ptr))

    @property
    def ep_dst(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_nodes, dtype=np.int32), np.diff(self.ep_ptr))
