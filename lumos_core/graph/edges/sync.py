"""``SYNC``: GPU -> CPU, a blocking call (stream/device/event synchronize, blocking copy) ends only
after the GPU work it waits for."""

from __future__ import annotations

import numpy as np

from lumos_core.graph.edges.cuda_sync import stream_sync_lanes
from lumos_core.graph.edges.edge_list import RankContext
from lumos_core.graph.model import EdgeKind
from lumos_core.graph.nodes import launches_by_stream
from lumos_core.trace.kineto_schema import (
    BLOCKING_COPY_CALLS,
    DEVICE_SYNC_CALLS,
    EVENT_RECORD_CALLS,
    EVENT_SYNC_CALLS,
    STREAM_SYNC_CALLS,
)
from lumos_core.trace.model import Kind, RankTrace

BLOCKING_CALLS = STREAM_SYNC_CALLS | DEVICE_SYNC_CALLS | EVENT_SYNC_CALLS | BLOCKING_COPY_CALLS


def add_syncs(ctx: RankContext) -> None:
    """GPU -> CPU: blocking calls end only after the GPU work they wait for."""
    t, rn, ep = ctx.trace, ctx.nodes, ctx.end_deps
    names = t.strings
    blocking = t.names_matching(BLOCKING_CALLS.__contains__)
    rt = t.kind == Kind.RUNTIME
    calls = np.flatnonzero(rt & blocking[t.name])
    if len(calls) == 0:
        return
    launch_nodes, launch_ts, launch_lane, stream_lane = launches_by_stream(t, rn)
    sync_stream = sync_event_streams(t)
    record = t.names_matching(EVENT_RECORD_CALLS.__contains__)
    srcs: list[int] = []
    dsts: list[int] = []
    for call in calls.tolist():
        node = rn.node_of_event[call]
        if node < 0:
            continue
        name = names[int(t.name[call])]
        ts = int(t.start[call])
        before = int(np.searchsorted(launch_ts, ts, side="right"))  # launches issued before the call
        if before == 0:
            continue
        if name in BLOCKING_COPY_CALLS:
            targets = [int(n) for n in np.flatnonzero(t.launch[rn.events[np.flatnonzero(rn.is_gpu)]] == call)]
            srcs.extend(rn.base + np.flatnonzero(rn.is_gpu)[targets])
            dsts.extend([node] * len(targets))
            continue
        if name in DEVICE_SYNC_CALLS:
            wanted = np.unique(stream_lane[:before])
        elif name in STREAM_SYNC_CALLS:
            lane = sync_stream.get(int(t.correlation[call]))
            if lane is None:  # no cuda_sync event: the stream this thread launched on last
                mine = np.flatnonzero(launch_lane[:before] == t.lane[call])
                lane = int(stream_lane[mine[-1]]) if len(mine) else int(stream_lane[before - 1])
            wanted = np.asarray([lane])
        else:  # event synchronize: the stream of the most recent event record on this thread
            rec = previous_on_lane(t, call, record)
            cut = before if rec < 0 else int(np.searchsorted(launch_ts, int(t.start[rec]), side="right"))
            if cut == 0:
                continue
            mine = np.flatnonzero(launch_lane[:cut] == t.lane[call])
            wanted = np.asarray([int(stream_lane[mine[-1]] if len(mine) else stream_lane[cut - 1])])
            before = cut
        for lane in wanted.tolist():
            on_lane = np.flatnonzero(stream_lane[:before] == lane)
            if len(on_lane):
                srcs.append(int(launch_nodes[on_lane[-1]]))
                dsts.append(node)
    ep.add(srcs, dsts, 0, True, EdgeKind.SYNC)


def sync_event_streams(t: RankTrace) -> dict[int, int]:
    """correlation of a cudaStreamSynchronize -> its stream's lane, from ``cuda_sync`` events."""
    return stream_sync_lanes(t)


def previous_on_lane(t: RankTrace, event: int, name_mask: np.ndarray) -> int:
    sl = t.lane_slice(int(t.lane[event]))
    idx = np.flatnonzero(name_mask[t.name[sl.start : event]])
    return sl.start + int(idx[-1]) if len(idx) else -1
