"""The args of cuda_sync events the graph reads are columns, extracted once at parse time and kept in
the cache: they must say exactly what decoding the args says, odd values included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_shared, shared
from tracegen import TraceBuilder

from lumos_core.graph.edges.cuda_sync import stream_sync_lanes, stream_wait_targets
from lumos_core.trace import cache
from lumos_core.trace.cuda_sync_args import cuda_syncs_of
from lumos_core.trace.kineto_reader import parse_trace_file
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Kind, RankTrace


def _from_args_sync(t: RankTrace) -> dict[int, int]:
    """What the stream-sync rule read from the decoded args before the columns existed."""
    out = {}
    for e in np.flatnonzero(t.kind == Kind.CUDA_SYNC).tolist():
        if t.args_of(e).get("cuda_sync_kind") == "Stream Sync":
            out[int(t.correlation[e])] = int(t.lane[e])
    return out


def _from_args_wait(t: RankTrace) -> dict[int, tuple[int, int, int]]:
    """What the event-wait rule read from the decoded args before the columns existed."""
    out = {}
    lane_of_stream = {(ln.device, ln.stream): ln.index for ln in t.lanes if ln.is_gpu}
    for e in np.flatnonzero(t.kind == Kind.CUDA_SYNC).tolist():
        a = t.args_of(e)
        if a.get("cuda_sync_kind") != "Stream Wait Event":
            continue
        lane = int(t.lane[e])
        try:
            src = lane_of_stream.get((t.lanes[lane].device, a.get("wait_on_stream")), -1)
        except TypeError:  # an unhashable value (a list) names no stream (the args path raised)
            src = -1
        rec = a.get("wait_on_cuda_event_record_corr_id", -1)
        out[int(t.correlation[e])] = (lane, src, int(rec) if isinstance(rec, int) else -1)
    return out


ODD_WAITS: list[dict[str, Any]] = [
    {"wait_on_stream": 13, "wait_on_cuda_event_record_corr_id": 1001},
    {"wait_on_stream": 13.0, "wait_on_cuda_event_record_corr_id": "1001"},
    {"wait_on_stream": "13", "wait_on_cuda_event_record_corr_id": 1001.0},
    {"wait_on_stream": True, "wait_on_cuda_event_record_corr_id": True},
    {"wait_on_stream": [13], "wait_on_cuda_event_record_corr_id": None},
    {"wait_on_stream": 99},  # a stream with no work in the trace
    {},
    {"wait_on_stream": 1e300, "wait_on_cuda_event_record_corr_id": 2**70},  # 2**70: stored as a float
    {"wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": -5},
]


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    b = TraceBuilder(rank=0, world=1)
    b.step(1, 1000, 900)
    b.launch("gemm", 1010, 3, 1020, 6, stream=7)
    b.launch("gemm", 1015, 3, 1030, 6, stream=13)
    b.launch("gemm", 1016, 3, 1040, 6, stream=1)
    for k, extra in enumerate(ODD_WAITS):
        corr = b.runtime("cudaStreamWaitEvent", 1100 + 10 * k, 2)
        b.sync_event("Stream Wait Event", 1101 + 10 * k, 7, corr, **extra)
    corr = b.runtime("cudaStreamSynchronize", 1300, 5)
    b.sync_event("Stream Sync", 1301, 13, corr)
    b.sync_event("Stream Sync", 1302, 7, corr)  # a repeated correlation: the last one wins
    b.sync_event("Event Sync", 1303, 7, b.runtime("cudaEventSynchronize", 1303, 1))
    b.sync_event(["not", "a", "kind"], 1304, 7, 5)  # type: ignore[arg-type]
    b.cpu("cudaStreamWaitEvent", 1310, 1, cat="cuda_sync", args={"cuda_sync_kind": {"odd": 1}})
    return b.write(tmp_path / "odd.json")


def test_the_columns_say_what_the_args_say(
    odd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = parse_trace_file(odd)
    assert t.cuda_syncs is not None and len(t.cuda_syncs) == t.count(Kind.CUDA_SYNC) == len(ODD_WAITS) + 5
    waits = stream_wait_targets(t)
    assert waits == _from_args_wait(t)
    # no stream: "13", [13], 99, absent, 1e300 (True is stream 1, as in a dict lookup)
    assert sorted(src for _, src, _ in waits.values()).count(-1) == 5
    assert stream_sync_lanes(t) == _from_args_sync(t)
    # A rank built elsewhere (no columns) decodes the args once, with the same answer.
    t.cuda_syncs = None
    assert stream_wait_targets(t) == waits and cuda_syncs_of(t) is t.cuda_syncs
    # The columns come back from the cache unchanged.
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(tmp_path / "cache"))
    fresh = load_job(odd).ranks[0]
    again = load_job(odd).ranks[0]
    assert cache.entry_exists(odd)
    for col in ("event", "kind", "wait_stream", "wait_stream_known", "record_corr"):
        assert np.array_equal(getattr(fresh.cuda_syncs, col), getattr(again.cuda_syncs, col)), col
    assert stream_wait_targets(again) == waits


@needs_shared
@pytest.mark.parametrize(
    "name", ["event_sync.json.gz", "event_sync_multi_stream.json.gz", "simple_add.json.gz"]
)
def test_real_cuda_sync_events(name: str) -> None:
    t = load_job(shared("hta-critical-path", name), use_cache=False).ranks[0]
    assert len(t.cuda_syncs) == t.count(Kind.CUDA_SYNC) > 0
    assert stream_wait_targets(t) == _from_args_wait(t)
    assert stream_sync_lanes(t) == _from_args_sync(t)
