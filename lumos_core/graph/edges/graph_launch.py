"""``GRAPH``: the order inside a CUDA graph. A graph launch releases all its kernels at once; the
graph's own edges (a branch on another stream that waits for the main one, a join back) are not in
the trace. A kernel of a graph that started later than its stream and its launch allow waited for
the kernel of the same graph, on another stream, that ended last before it: that dependency is
added, keeping the measured few-µs latency. Kernels of one graph on one stream follow each other in
their recorded order through ``STREAM``; the launch gates them through ``LAUNCH``."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import QUEUED_GAP_NS, previous_end_on_stream
from lumos_core.trace.graph_launches import graph_launch_number

_ENDED_TOLERANCE_NS = 2_000  # timestamps are µs-rounded: "ended before" allows this much


def add_graph_order(ctx: RankContext) -> None:
    t, rn, sp = ctx.trace, ctx.nodes, ctx.start_deps
    number = graph_launch_number(t)
    gpu_nodes = np.flatnonzero(rn.is_gpu)
    ev = rn.events[gpu_nodes]
    g = number[ev]
    inside = np.flatnonzero(g >= 0)
    if len(inside) == 0:
        return
    ev_in, g_in = ev[inside], g[inside]
    start = t.start[ev_in]
    end = start + t.dur[ev_in]
    lane = t.lane[ev_in]
    launch = t.launch[ev_in]
    released = t.start[launch] + t.dur[launch] + ctx.launch_latency
    prev_end = previous_end_on_stream(t, ev_in)
    waited = start - np.maximum(prev_end, released) > QUEUED_GAP_NS
    srcs, dsts, lags = [], [], []
    for i in np.flatnonzero(waited).tolist():
        same = np.flatnonzero((g_in == g_in[i]) & (lane != lane[i]) & (end <= start[i] + _ENDED_TOLERANCE_NS))
        if len(same) == 0:
            continue
        j = int(same[np.argmax(end[same])])
        srcs.append(rn.base + int(gpu_nodes[inside[j]]))
        dsts.append(rn.base + int(gpu_nodes[inside[i]]))
        lags.append(min(max(int(start[i] - end[j]), 0), QUEUED_GAP_NS))
    sp.add(srcs, dsts, lags, True, EdgeKind.GRAPH)
