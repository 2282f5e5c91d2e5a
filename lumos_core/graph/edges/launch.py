"""``LAUNCH``: a runtime call -> the GPU activity it launched, after the launch latency."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import QUEUED_GAP_NS, previous_end_on_stream
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Job


def add_launches(ctx: RankContext) -> None:
    """Runtime call -> the GPU activity with its correlation id."""
    t, rn, sp, typical = ctx.trace, ctx.nodes, ctx.start_deps, ctx.launch_latency
    gpu_nodes = np.flatnonzero(rn.is_gpu)
    ev = rn.events[gpu_nodes]
    launch = t.launch[ev]
    ok = launch >= 0
    # The launch call is a task unless it has children (then its last task stands in for its end).
    src_end = rn.last_leaf_within[launch[ok]]
    good = src_end >= 0
    dst = rn.base + gpu_nodes[ok][good]
    src_end = src_end[good]
    # Launch latency, measured from the end of the launch call: a kernel is submitted when the call
    # returns (a call can take seconds when it loads a module lazily; the kernel waits for it).
    # Kernels that did not queue behind others show the latency itself; queued ones get the typical.
    launch_end = t.start[launch[ok][good]] + t.dur[launch[ok][good]]
    lat = t.start[ev[ok][good]] - launch_end
    lag = np.minimum(lat, typical)
    sp.add(src_end, dst, lag, True, EdgeKind.LAUNCH)


def typical_launch_latency(job: Job) -> int:
    """Time from a launch call's end to its kernel's start when nothing else holds the kernel back.

    Measured over kernels that found their stream idle (queued kernels wait for their predecessor);
    some of those still wait for an event, so a low percentile, over all ranks, is the latency."""
    samples = []
    for t in job.ranks:
        act = np.flatnonzero(np.isin(t.kind, GPU_ACTIVITY_KINDS) & (t.launch >= 0))
        if len(act) == 0:
            continue
        launch = t.launch[act]
        launch_end = t.start[launch] + t.dur[launch]
        lat = t.start[act] - launch_end
        prev_end = previous_end_on_stream(t, act)
        # Idle when the launch returned, not merely a gap before the kernel: on a GPU-bound trace a
        # kernel launched long ahead that then waits for another stream (an NCCL event) shows a
        # gap too, and its "latency" would be the whole queue (hundreds of ms).
        idle = (t.start[act] - prev_end > QUEUED_GAP_NS) & (prev_end <= launch_end)
        samples.append(lat[idle & (lat >= 0)])
    sample = np.concatenate(samples) if samples else np.zeros(0, np.int64)
    return int(np.percentile(sample, 20)) if len(sample) else 2_000
