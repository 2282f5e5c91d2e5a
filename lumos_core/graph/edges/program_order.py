"""``CPU_THREAD`` and ``STREAM``: consecutive tasks of a processor (program order on a thread, issue
order on a stream)."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import QUEUED_GAP_NS


def add_program_order(ctx: RankContext) -> None:
    """Program order on threads and issue order on streams."""
    t, rn, sp = ctx.trace, ctx.nodes, ctx.start_deps
    ev = rn.events
    lane = t.lane[ev]
    same = lane[1:] == lane[:-1]
    src = rn.base + np.flatnonzero(same)
    dst = src + 1
    prev_ev, next_ev = ev[:-1][same], ev[1:][same]
    prev_end = t.start[prev_ev] + t.dur[prev_ev]
    gap = t.start[next_ev] - prev_end
    gpu = rn.is_gpu[1:][same]
    # CPU: the time between two tasks of a thread is CPU work (kept). GPU: a stream that ran the next
    # kernel right after the previous one was queued (keep its small inter-kernel gap); a longer gap
    # means the kernel waited for something else (its launch, an event) - those edges explain it.
    overlap = gap < 0
    # A kernel whose launch returned only after its predecessor ended was not queued behind it: its
    # gap is launch latency (the launch dependency's), not the stream's own overhead.
    launch = t.launch[next_ev]
    has_launch = launch >= 0
    launch_end = np.where(has_launch, t.start[np.maximum(launch, 0)] + t.dur[np.maximum(launch, 0)], 0)
    queued = ~has_launch | (launch_end <= prev_end)
    lag = np.where(gpu & ((gap > QUEUED_GAP_NS) | ~queued), 0, gap)
    # Overlapping kernels on one stream (programmatic dependent launch) are kept as measured: the
    # later one depends on the earlier one's start, not its end.
    from_end = ~(gpu & overlap)
    lag = np.where(gpu & overlap, t.start[next_ev] - t.start[prev_ev], lag)
    cpu_kind = ~gpu
    sp.add(src[cpu_kind], dst[cpu_kind], lag[cpu_kind], from_end[cpu_kind], EdgeKind.CPU_THREAD)
    sp.add(src[gpu], dst[gpu], lag[gpu], from_end[gpu], EdgeKind.STREAM)
