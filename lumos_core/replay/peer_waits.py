"""Collectives whose peers are not loaded (a folder holding some ranks of a job).

A collective kernel runs until every rank of its group has arrived. With all its ranks loaded the
graph joins them (arrive -> join -> transfer) and waiting is separated from moving data. When some
ranks are missing (their files were never published, one rank of a 16-rank job opened alone) the
kernel is an ordinary task: its measured duration holds the wait for the absent ranks, and its start
may sit later than every dependency the loaded ranks show. Nothing in the folder can predict that
wait, so by default the replay keeps it as measured (the delay before the kernel becomes a fixed
lag of its binding dependency, like ``--keep-stalls`` for these kernels only); dropped, the kernel
lasts its transfer estimate (the fastest instance of the same kernel name on the rank) and starts
when its dependencies allow.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lumos_core.graph.model import NO_ANCHOR, ExecutionGraph, NodeType


def unloaded_peer_nodes(graph: ExecutionGraph) -> np.ndarray:
    """Bool per node: a collective kernel (not joined across ranks) whose group has ranks that are
    not loaded: its instance is unmatched or has fewer members than expected."""
    out = np.zeros(graph.n_nodes, bool)
    match = graph.job.collective_match
    for t in graph.job.ranks:
        c = t.collectives
        if len(c) == 0:
            continue
        inst = match.instance.get(t.rank) if match is not None else None
        if inst is None or len(inst) != len(c):
            missing = np.ones(len(c), bool)
        else:
            ok = inst >= 0
            missing = ~ok
            missing[ok] = ~match.complete[inst[ok]]
        missing &= c.group_size != 1  # a group of one waits for nobody
        of_event = graph.rank_nodes.get(t.rank)
        if of_event is None:
            continue
        nodes = of_event[c.event[missing]]
        nodes = nodes[nodes >= 0]
        out[nodes] = True
    out &= (graph.node_type == NodeType.GPU) & (graph.arrive_of < 0)
    return out


def wait_estimate(graph: ExecutionGraph, mask: np.ndarray) -> np.ndarray:
    """Per node of ``mask``: its measured duration minus the fastest measured instance of the same
    kernel name on its rank (the transfer time when nobody was waited for); 0 elsewhere."""
    out = np.zeros(graph.n_nodes, np.int64)
    nodes = np.flatnonzero(mask)
    if len(nodes) == 0:
        return out
    dur = graph.measured_end[nodes] - graph.measured_start[nodes]
    name = np.zeros(len(nodes), np.int64)
    for t in graph.job.ranks:
        mine = graph.rank[nodes] == t.rank
        name[mine] = t.name[graph.event[nodes[mine]]]
    key = graph.rank[nodes].astype(np.int64) * (1 << 32) + name
    uniq, inv = np.unique(key, return_inverse=True)
    fastest = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(fastest, inv.reshape(-1), dur)
    out[nodes] = np.maximum(dur - fastest[inv.reshape(-1)], 0)
    return out


def start_delays(graph: ExecutionGraph) -> tuple[np.ndarray, np.ndarray]:
    """Per node on measured times: how much later than its binding start dependency allowed it
    started (0 where anchored or exact), and the index of that dependency in the CSR columns."""
    n = graph.n_nodes
    src = graph.sp_src.astype(np.int64)
    dst = graph.sp_dst
    ref = np.where(graph.sp_from_end, graph.measured_end[src], graph.measured_start[src])
    bound = ref + graph.sp_lag
    order = np.lexsort((bound, dst))
    last = np.r_[dst[order][1:] != dst[order][:-1], True] if len(order) else np.zeros(0, bool)
    best = order[last]
    until = np.full(n, np.iinfo(np.int64).min, np.int64)
    until[dst[best]] = bound[best]
    edge = np.full(n, -1, np.int64)
    edge[dst[best]] = best
    delay = np.where(edge >= 0, graph.measured_start - until, 0)
    delay[graph.anchor != NO_ANCHOR] = 0
    return np.maximum(delay, 0), edge


@dataclasses.dataclass
class PeerWaits:
    """What the replay did with the waits of collectives whose peers are not loaded."""

    kept: bool
    collectives: int  # kernels whose peers are not loaded (or did not record them)
    ranks_missing: bool  # the job has ranks that are not in the folder
    start_delay_ns: int  # measured delay before them that no loaded dependency explains
    in_kernel_ns: int  # estimated wait inside them (duration over the fastest same kernel)

    @property
    def total_ns(self) -> int:
        return self.start_delay_ns + self.in_kernel_ns

    def note(self, other_error_pct: float | None = None, error_pct: float | None = None) -> str | None:
        if not self.collectives:
            return None
        what = "kept as measured (--no-keep-peer-waits drops them)" if self.kept else (
            "dropped (the default keeps them)"
        )
        if self.ranks_missing:
            head = f"peers not loaded: {self.collectives} collective kernels wait for ranks that are not in the folder"
        else:
            head = (
                f"collectives at the trace window's edges: {self.collectives} collective kernels wait for "
                "peers that did not record them (every rank is loaded)"
            )
        line = (
            f"{head}; their waits ({self.start_delay_ns / 1e6:.2f} ms before them, about "
            f"{self.in_kernel_ns / 1e6:.2f} ms inside them) are {what}"
        )
        if error_pct is not None and other_error_pct is not None:
            kept, dropped = (error_pct, other_error_pct) if self.kept else (other_error_pct, error_pct)
            line += f"; in-sample iteration error {kept:.3f} % kept, {dropped:.3f} % dropped"
        return line

    def as_dict(self) -> dict[str, object]:
        return {
            "kept": self.kept,
            "collectives": self.collectives,
            "ranks_missing": self.ranks_missing,
            "start_delay_us": self.start_delay_ns / 1000,
            "in_kernel_wait_us": self.in_kernel_ns / 1000,
        }


def _ranks_missing(graph: ExecutionGraph) -> bool:
    """Whether the job's recorded world size is larger than the ranks loaded (unknown: True)."""
    sizes = [t.world_size for t in graph.job.ranks if t.world_size]
    return not sizes or max(sizes) > len(graph.job.ranks)


def with_peer_waits(graph: ExecutionGraph, keep: bool) -> tuple[ExecutionGraph, PeerWaits]:
    """``graph`` with the waits of collectives whose peers are not loaded kept (their start delay
    becomes a fixed lag of the binding dependency; their measured duration stays) or dropped (no
    start delay, duration cut to the transfer estimate). The graph is returned unchanged when there
    is no such collective."""
    mask = unloaded_peer_nodes(graph)
    delay, edge = start_delays(graph)
    inside = wait_estimate(graph, mask)
    info = PeerWaits(
        keep,
        int(mask.sum()),
        _ranks_missing(graph),
        int(delay[mask].sum()),
        int(inside.sum()),
    )
    if not mask.any():
        return graph, info
    if keep:
        lag = graph.sp_lag.copy()
        at = np.flatnonzero(mask & (edge >= 0) & (delay > 0))
        lag[edge[at]] += delay[at]
        return dataclasses.replace(graph, sp_lag=lag), info
    dur = graph.dur.copy()
    dur[mask] = np.maximum(dur[mask] - inside[mask], 0)
    return dataclasses.replace(graph, dur=dur), info
