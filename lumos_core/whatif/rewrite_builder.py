"""The rewritten graph while it is assembled: its columns (:class:`Builder`), the traced tasks a
copy is made from (:class:`Template`), program order on each processor (:func:`chain`), and the
finished graph (:func:`finish`, origin REBUILT: its tasks were never measured)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.graph.factory import Dependencies, make_graph
from lumos_core.graph.model import NO_ANCHOR, EdgeKind, ExecutionGraph, GraphOrigin, NodeType
from lumos_core.trace.model import Job

Key = tuple[int, int, int, int]  # (source stage, phase, layer, source microbatch)
LAST_CPU = -1  # key of the program's latest CPU node in the per-processor "last" map
HANDOFF_NS = 10_000  # one thread resuming after another (Python -> autograd engine and back)


@dataclass
class Template:
    key: Key
    rank: int  # source rank
    nodes: np.ndarray  # source graph nodes, in (processor, measured start) order


@dataclass
class Builder:
    """Columns of the rewritten graph while it is assembled."""

    rank: list[int] = field(default_factory=list)  # source rank (re-timing reads source events)
    event: list[int] = field(default_factory=list)  # source event, -1 for nodes the rewrite creates
    new_rank: list[int] = field(default_factory=list)
    node_type: list[int] = field(default_factory=list)
    proc: list[int] = field(default_factory=list)
    dur: list[int] = field(default_factory=list)
    instance: list[int] = field(default_factory=list)
    arrive_of: list[int] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # what a created node is ("send", "recv", "")
    sp: list[tuple[int, int, int, bool, int]] = field(default_factory=list)  # src, dst, lag, from_end, kind
    ep: list[tuple[int, int, int, bool, int]] = field(default_factory=list)
    procs: list[tuple[int, int]] = field(default_factory=list)  # (new rank, new lane)
    proc_ids: dict[tuple[int, int], int] = field(default_factory=dict)

    def add(
        self,
        src_rank: int,
        src_event: int,
        new_rank: int,
        node_type: int,
        proc: int,
        dur: int,
        inst: int,
        extra: str = "",
    ) -> int:
        self.rank.append(src_rank)
        self.event.append(src_event)
        self.new_rank.append(new_rank)
        self.node_type.append(node_type)
        self.proc.append(proc)
        self.dur.append(max(int(dur), 0))
        self.instance.append(inst)
        self.arrive_of.append(-1)
        self.extra.append(extra)
        return len(self.dur) - 1

    def proc_id(self, new_rank: int, lane: int) -> int:
        key = (new_rank, lane)
        pid = self.proc_ids.get(key)
        if pid is None:
            pid = self.proc_ids[key] = len(self.procs)
            self.procs.append(key)
        return pid


def chain(b: Builder, node: int, lag: int, last: dict) -> None:
    """Program order: ``node`` runs after what its processor ran last (and after any transfer its
    stream was told to wait for)."""
    proc = b.proc[node]
    prev = last.get(proc)
    if prev is not None:
        kind = EdgeKind.CPU_THREAD if b.node_type[node] == NodeType.CPU else EdgeKind.STREAM
        b.sp.append((prev, node, lag, True, int(kind)))
    for src in last.pop(("wait", proc), ()):
        b.sp.append((src, node, 0, True, int(EdgeKind.EVENT_WAIT)))
    last[proc] = node


def finish(job: Job, b: Builder) -> ExecutionGraph:
    n = len(b.dur)
    sp = np.asarray(b.sp, dtype=np.int64).reshape(-1, 5)
    ep = np.asarray(b.ep, dtype=np.int64).reshape(-1, 5)
    anchor = np.full(n, NO_ANCHOR, np.int64)
    has_pred = np.zeros(n, bool)
    has_pred[sp[:, 1]] = True
    anchor[~has_pred] = 0  # the new job starts at 0; everything else follows its dependencies

    def deps(e: np.ndarray) -> Dependencies:
        return Dependencies(e[:, 0], e[:, 1], e[:, 2], e[:, 3].astype(bool), e[:, 4].astype(np.int8))

    return make_graph(
        job,
        origin=GraphOrigin.REBUILT,
        rank=np.asarray(b.rank, np.int32),
        event=np.asarray(b.event, np.int32),
        node_type=np.asarray(b.node_type, np.int8),
        proc=np.asarray(b.proc, np.int32),
        dur=np.asarray(b.dur, np.int64),
        anchor=anchor,
        start_deps=deps(sp),
        end_deps=deps(ep),
        procs=list(b.procs),
        arrive_of=np.asarray(b.arrive_of, np.int32),
    )
