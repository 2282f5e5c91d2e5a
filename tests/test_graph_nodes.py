"""Task nodes of a rank: the whole-rank leaf maps (first task at or after an event, last task within
it) against the plain per-lane loops they replaced, on random lanes and on real traces."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO, needs_shared, shared
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos_core.graph.nodes import leaf_maps, rank_nodes
from lumos_core.trace.loader import load_job


def leaf_maps_per_lane(lane_begin, start, dur, node_of_event):  # type: ignore[no-untyped-def]
    """The reference: one lane at a time."""
    n = len(start)
    first_after = np.full(n, -1, np.int64)
    for lane in range(len(lane_begin) - 1):
        a, b = int(lane_begin[lane]), int(lane_begin[lane + 1])
        if b == a:
            continue
        ids = node_of_event[a:b]
        idx = np.where(ids >= 0, np.arange(b - a), b - a)
        nxt = np.minimum.accumulate(idx[::-1])[::-1]
        ok = nxt < b - a
        fa = np.full(b - a, -1, np.int64)
        fa[ok] = ids[nxt[ok]]
        first_after[a:b] = fa
    last_within = np.full(n, -1, np.int64)
    for lane in range(len(lane_begin) - 1):
        a, b = int(lane_begin[lane]), int(lane_begin[lane + 1])
        tasks = np.flatnonzero(node_of_event[a:b] >= 0)
        if len(tasks) == 0:
            continue
        task_starts = start[a:b][tasks]
        ends = start[a:b] + dur[a:b]
        k = np.maximum(np.searchsorted(task_starts, ends, side="left") - 1, 0)
        cand = a + tasks[k]
        last_within[a:b] = np.where(cand >= np.arange(a, b), node_of_event[cand], -1)
    return first_after, last_within


class _Lanes:
    """Just what the leaf maps read of a rank."""

    def __init__(self, lane_begin: np.ndarray, start: np.ndarray, dur: np.ndarray) -> None:
        self.lane_begin, self.start, self.dur = lane_begin, start, dur

    def __len__(self) -> int:
        return len(self.start)


def _check(t, node_of_event: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    events = np.flatnonzero(node_of_event >= 0)
    got = leaf_maps(t, events, node_of_event)
    want = leaf_maps_per_lane(t.lane_begin, t.start, t.dur, node_of_event)
    for g, w in zip(got, want):
        assert g.dtype == np.int32 and np.array_equal(g, w)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 60), st.booleans())
def test_leaf_maps_equal_the_per_lane_loops(seed: int, lanes: int, n: int, huge_times: bool) -> None:
    """Empty lanes, lanes without tasks, tied starts, zero durations, events ending before, at and
    after the next task; times near the int64 limit take the per-lane search."""
    rng = np.random.default_rng(seed)
    sizes = rng.multinomial(n, np.ones(lanes) / lanes)
    lane_begin = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    base = 2**61 if huge_times else 10**9
    start = np.concatenate([np.sort(rng.integers(0, 50, k)) * 100 for k in sizes]).astype(np.int64)
    start = start + base * rng.integers(0, 2, lanes).repeat(sizes) if huge_times else start + base
    dur = (rng.integers(0, 4, n) * rng.integers(0, 300, n)).astype(np.int64)
    node_of_event = np.where(rng.random(n) < 0.5, 7 + np.arange(n), -1).astype(np.int32)
    node_of_event[node_of_event >= 0] = 7 + np.arange(int((node_of_event >= 0).sum()))
    _check(_Lanes(lane_begin, start, dur), node_of_event)


def _ranks(path) -> list:  # type: ignore[no-untyped-def]
    return list(load_job(path).ranks)


@pytest.mark.parametrize("folder", ["cpu-gpt/base"])
def test_leaf_maps_on_recorded_ranks(folder: str) -> None:
    for t in _ranks(REPO / "tests" / "data" / folder):
        _check(t, rank_nodes(t, 0).node_of_event)


@needs_shared
@pytest.mark.parametrize(
    "path",
    [
        "h100-nanogpt-8rank",
        "dlrm-v100-8rank",
        "hta-critical-path/event_sync_multi_stream.json.gz",
        "edge-cases/backward_thread_plain.json",
        "edge-cases/legacy_pytorch18_resnet50.pt.trace.json.gz",
    ],
)
def test_leaf_maps_on_real_ranks(path: str) -> None:
    for t in _ranks(shared(path)):
        rn = rank_nodes(t, 100)
        _check(t, rn.node_of_event)
