"""What a dependency rule reads (one rank and its task nodes) and where it writes (edge lists)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import RankNodes
from lumos_core.trace.model import RankTrace


@dataclass
class EdgeList:
    """Edge lists being collected before they become CSR arrays."""

    src: list[np.ndarray] = field(default_factory=list)
    dst: list[np.ndarray] = field(default_factory=list)
    lag: list[np.ndarray] = field(default_factory=list)
    from_end: list[np.ndarray] = field(default_factory=list)
    kind: list[np.ndarray] = field(default_factory=list)

    def add(self, src, dst, lag, from_end, kind: EdgeKind) -> None:  # type: ignore[no-untyped-def]
        # node ids fit in int32 (the graph stores them so): half the memory of int64 while building
        src = np.asarray(src, np.int32).ravel()
        n = len(src)
        if n == 0:
            return
        self.src.append(src)
        self.dst.append(np.asarray(dst, np.int32).ravel())
        self.lag.append(np.broadcast_to(np.asarray(lag, np.int64), (n,)).copy())
        self.from_end.append(np.broadcast_to(np.asarray(from_end, bool), (n,)).copy())
        self.kind.append(np.full(n, int(kind), np.int8))

    def extend(self, other: EdgeList) -> None:
        """Append ``other``'s edges (a rank's, built on its own)."""
        self.src += other.src
        self.dst += other.dst
        self.lag += other.lag
        self.from_end += other.from_end
        self.kind += other.kind

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.src:
            z = np.zeros(0, np.int64)
            return z, z, z, np.zeros(0, bool), np.zeros(0, np.int8)
        return (
            np.concatenate(self.src, dtype=np.int32, casting="same_kind"),
            np.concatenate(self.dst, dtype=np.int32, casting="same_kind"),
            np.concatenate(self.lag),
            np.concatenate(self.from_end),
            np.concatenate(self.kind),
        )


@dataclass
class RankContext:
    """One rank being built: its trace and task nodes, the start and end dependency lists the rules
    add to, notes for the user, and the job's typical launch latency."""

    trace: RankTrace
    nodes: RankNodes
    start_deps: EdgeList  # start[dst] >= (end|start)[src] + lag
    end_deps: EdgeList  # end[dst] >= end[src] + lag (blocking calls)
    notes: list[str]
    launch_latency: int
