"""The vectorised pieces of the event-wait and sync rules against the plain loops they replaced."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from kernel_references import search_in_lanes, waits_recorded_over_reference

from lumos_core.graph import kernels
from lumos_core.graph.edges.cuda_sync import find_sorted, last_by_key
from lumos_core.graph.edges.event_wait import ROUNDS, waits_recorded_over
from lumos_core.graph.nodes import QUEUED_GAP_NS, previous_end_on_stream
from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Kind


def _search_loop(key_lane, key_ts, lane, ts, side):  # type: ignore[no-untyped-def]
    out = np.empty(len(lane), np.int64)
    for i, (ln, t) in enumerate(zip(lane.tolist(), ts.tolist())):
        a = int(np.searchsorted(key_lane, ln, "left"))
        b = int(np.searchsorted(key_lane, ln, "right"))
        out[i] = a + int(np.searchsorted(key_ts[a:b], t, side))
    return out


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("scale", [1, 10**6, 2**61])  # 2**61: (lane, time) no longer fits one int64
def test_search_in_lanes_equals_a_search_per_lane(seed: int, scale: int) -> None:
    rng = np.random.default_rng(seed)
    n, m, lanes = int(rng.integers(0, 30)), int(rng.integers(0, 30)), int(rng.integers(1, 6))
    key_lane = rng.integers(0, lanes, n)
    key_ts = rng.integers(-5, 20, n) * (scale // 4 if scale > 1 else 1)
    order = np.lexsort((key_ts, key_lane))
    key_lane, key_ts = key_lane[order], key_ts[order]
    lane = rng.integers(0, lanes + 1, m)
    ts = rng.integers(-8, 24, m) * (scale // 4 if scale > 1 else 1)
    for side in ("left", "right"):
        got = search_in_lanes(key_lane, key_ts, lane, ts, side)
        assert np.array_equal(got, _search_loop(key_lane, key_ts, lane, ts, side)), side


@pytest.mark.parametrize("seed", range(40))
def test_last_by_key_and_find_sorted_are_a_dict(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(-3, 12, int(rng.integers(0, 25)))
    d = {k: i for i, k in enumerate(keys.tolist())}
    uniq, last = last_by_key(keys)
    assert dict(zip(uniq.tolist(), last.tolist())) == d and list(uniq) == sorted(d)
    wanted = rng.integers(-5, 15, 20)
    pos = find_sorted(uniq, wanted)
    assert [last[p] if p >= 0 else None for p in pos.tolist()] == [d.get(w) for w in wanted.tolist()]


def _previous_end_loop(t, events):  # type: ignore[no-untyped-def]
    out = np.zeros(len(events), np.int64)
    act = np.isin(t.kind, GPU_ACTIVITY_KINDS)
    for i, e in enumerate(events.tolist()):
        lo = int(t.lane_begin[t.lane[e]])
        before = [j for j in range(lo, e) if act[j]]
        out[i] = t.start[before[-1]] + t.dur[before[-1]] if before else 0
    return out


@pytest.mark.parametrize("seed", range(40))
def test_previous_end_on_stream_equals_a_walk_back_on_the_lane(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 8, int(rng.integers(1, 5)))
    n = int(sizes.sum())
    if n == 0:
        return
    kinds = np.asarray([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.CUDA_SYNC, Kind.GPU_ANNOTATION], np.int8)
    t = SimpleNamespace(
        kind=rng.choice(kinds, n),
        lane=np.repeat(np.arange(len(sizes)), sizes).astype(np.int32),
        lane_begin=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        start=np.sort(rng.integers(0, 1000, n)).astype(np.int64),
        dur=rng.integers(0, 50, n).astype(np.int64),
    )
    events = rng.integers(0, n, int(rng.integers(0, 12)))
    assert np.array_equal(previous_end_on_stream(t, events), _previous_end_loop(t, events))  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(60))
def test_waits_recorded_over_compiled_equals_numpy_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m, streams = int(rng.integers(2, 60)), int(rng.integers(2, 40)), int(rng.integers(1, 5))
    stream_lane = rng.integers(0, streams, n).astype(np.int32)
    launch_ts = np.sort(rng.integers(0, 500, n)).astype(np.int64)
    act_start = (launch_ts + rng.integers(0, 100, n)).astype(np.int64)
    act_end = act_start + rng.integers(0, 60, n)
    src = rng.integers(0, n, m).astype(np.int64)
    dst = rng.integers(0, n, m).astype(np.int64)
    wait_ts = rng.integers(0, 600, m).astype(np.int64)
    rec_ts = wait_ts - rng.integers(0, 300, m)
    args = (src, dst, rec_ts, wait_ts, stream_lane, launch_ts, act_start, act_end)
    want = waits_recorded_over_reference(*args)
    for got in (waits_recorded_over(*args), _kernel_as_python(*args)):
        for g, w in zip(got, want):
            assert g.dtype == np.int64 and np.array_equal(g, w)


def _kernel_as_python(src, dst, rec_ts, wait_ts, stream_lane, launch_ts, act_start, act_end):  # type: ignore[no-untyped-def]
    """The kernel's own code run by the interpreter (what LUMOS_JIT=0 would run)."""
    into = stream_lane[dst]
    order = np.lexsort((wait_ts, into))
    i64 = np.int64
    return kernels.waits_recorded_over.py_func(
        src, dst, rec_ts, into[order].astype(i64), wait_ts[order], order.astype(i64), stream_lane.astype(i64),
        launch_ts, act_start, act_end, QUEUED_GAP_NS, ROUNDS,
    )  # fmt: skip
