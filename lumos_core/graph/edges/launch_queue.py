"""``LAUNCH_QUEUE``: GPU -> CPU, a launch call cannot return while the device holds its limit of
launched-but-not-started work."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import launches_by_stream

LAUNCH_QUEUE_DEPTH = 1024  # CUDA's limit of launched work not yet started, per device


def add_launch_queue(ctx: RankContext) -> None:
    """The i-th launch on a device cannot return before the (i - Q)-th launched activity started.

    Q is CUDA's pending-launch limit (about 1024); the trace itself shows it when the GPU fell far
    enough behind (pending work plateaus there), so Q is never below what was measured."""
    t, rn, ep = ctx.trace, ctx.nodes, ctx.end_deps
    nodes, _launch_ts, _launch_lane, _stream_lane = launches_by_stream(t, rn)
    if len(nodes) <= LAUNCH_QUEUE_DEPTH:
        return
    ev = rn.events[nodes - rn.base]
    call = t.launch[ev]
    call_end = t.start[call] + t.dur[call]
    starts_sorted = np.sort(t.start[ev])
    pending = np.arange(1, len(ev) + 1) - np.searchsorted(starts_sorted, call_end, side="right")
    depth = max(LAUNCH_QUEUE_DEPTH, int(pending.max()))
    if len(nodes) <= depth:
        return
    src = nodes[: len(nodes) - depth]
    dst_calls = rn.last_leaf_within[call[depth:]]
    ok = dst_calls >= 0
    ep.add(src[ok], dst_calls[ok], 0, False, EdgeKind.LAUNCH_QUEUE)
