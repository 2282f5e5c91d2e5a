"""Row tables and level-of-detail spans: nothing is ever dropped, spans never outnumber pixels,
the visible window is found by binary search exactly, and the pyramid agrees with direct merging."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_shared, shared

from app.view_model.lane_data import PYRAMID_MIN_EVENTS, RowTable, build_row_table, merge_spans, row_order
from lumos_core.trace.kernel_families import event_families
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Kind


def random_row(n: int, seed: int = 0, gap_scale: float = 0.02) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-overlapping events (ms) with durations and gaps from 1 ns to ~100 µs."""
    rng = np.random.default_rng(seed)
    dur = rng.exponential(0.01, n) + 1e-6
    gap = rng.exponential(gap_scale, n)
    start = np.cumsum(gap + np.r_[0, dur[:-1]])
    fam = rng.integers(0, 5, n).astype(np.uint8)
    return start, start + dur, fam


def assert_covered(spans_s: np.ndarray, spans_e: np.ndarray, s: np.ndarray, e: np.ndarray) -> None:
    k = np.searchsorted(spans_s, s, side="right") - 1
    assert (k >= 0).all()
    assert (spans_e[k] >= e - 1e-12).all(), "an event is not inside any span"


@pytest.mark.parametrize("px", [1e-6, 1e-4, 1e-2, 1.0])
def test_merge_covers_every_event_and_spans_never_outnumber_pixels(px: float) -> None:
    s, e, f = random_row(20_000, seed=1)
    ms, me_true, tail, mf, _w, lead = merge_spans(s, e, f, np.arange(len(s)), px)
    me = np.maximum(me_true, tail + px)
    assert (np.diff(ms) > 0).all() and (ms[1:] > me[:-1]).all()  # sorted, disjoint
    assert (me - ms >= px - 1e-12).all()  # at least a pixel wide: tiny events stay visible
    assert_covered(ms, me, s, e)
    assert len(ms) <= (e[-1] - s[0]) / px + 1
    # each span's lead is its longest member and gives the span its family
    assert (ms <= s[lead]).all() and (e[lead] <= me + 1e-12).all() and (mf == f[lead]).all()
    k = np.searchsorted(ms, s, side="right") - 1
    longest = np.zeros(len(ms))
    np.maximum.at(longest, k, e - s)
    assert np.allclose((e - s)[lead], longest)


def test_merged_span_takes_the_family_of_its_longest_member() -> None:
    s = np.array([0.0, 0.001, 0.002, 10.0])
    e = np.array([0.0009, 0.0019, 0.0100, 10.5])
    f = np.array([1, 1, 3, 2], np.uint8)
    ms, me, tail, mf, _w, lead = merge_spans(s, e, f, np.arange(4), 0.5)
    assert ms.tolist() == [0.0, 10.0] and me.tolist() == [0.01, 10.5] and tail.tolist() == [0.002, 10.0]
    # drawn to max(end, last start + px): the tiny events at the start stay a pixel wide
    assert np.maximum(me, tail + 0.5).tolist() == [0.502, 10.5]
    assert mf.tolist() == [3, 2] and lead.tolist() == [2, 3]


def test_pyramid_spans_agree_with_direct_merging() -> None:
    n = PYRAMID_MIN_EVENTS * 3
    s, e, f = random_row(n, seed=2)
    table = RowTable([(0, 0)], np.array([0, n]), s, e, np.arange(n, dtype=np.int32), f)
    x0, x1 = s[0], e[-1]
    for px in (0.002, 0.05, 0.7):
        sp = table.spans(0, x0, x1, px)
        assert table._pyramid, "a long row uses the pyramid"
        assert_covered(sp.start, sp.end, s, e)
        assert len(sp) <= (x1 - x0) / px + 1
        direct = merge_spans(s, e, f, np.arange(n), px)
        # exactly the same spans as merging every event at this resolution
        assert np.array_equal(sp.start, direct[0])
        assert np.allclose(sp.end, np.maximum(direct[1], direct[2] + px))
        assert np.array_equal(sp.family, direct[3]) and np.array_equal(sp.lead, direct[5])
    # zoomed in a part of the row
    mid = s[n // 2]
    sp = table.spans(0, mid, mid + 1.0, 1e-3)
    inside = (e > mid) & (s < mid + 1.0)
    assert_covered(sp.start, sp.end, s[inside], np.minimum(e[inside], mid + 1.0 + 2e-3))


@needs_shared
def test_rank_tables_of_nanogpt_window_and_find() -> None:
    job = load_job(shared("h100-nanogpt-8rank"))
    r0 = job.rank(0)
    table = build_row_table(r0, event_families(r0))
    # every drawable event is in exactly one row; GPU annotations and sync markers are not drawn
    drawn = np.isin(
        r0.kind,
        [
            Kind.KERNEL,
            Kind.MEMCPY,
            Kind.MEMSET,
            Kind.CPU_OP,
            Kind.USER_ANNOTATION,
            Kind.RUNTIME,
            Kind.PYTHON_FUNCTION,
            Kind.OTHER,
        ],
    )
    assert len(table) == int(drawn.sum()) == len(np.unique(table.event))
    rng = np.random.default_rng(3)
    for row in range(table.n_rows):
        a, b = table.row_slice(row)
        s, e = table.start[a:b], table.end[a:b]
        assert (np.diff(s) >= 0).all()
        lane, depth = table.keys[row]
        assert (r0.lane[table.event[a:b]] == lane).all() and (r0.depth[table.event[a:b]] == depth).all()
        for _ in range(5):
            x0 = float(rng.uniform(0, 230))
            x1 = x0 + float(rng.exponential(5))
            i0, i1 = table.window(row, x0, x1)
            brute = np.flatnonzero((e > x0) & (s < x1)) + a
            assert set(brute.tolist()) <= set(range(i0, i1))
        if b > a:
            j = a + (b - a) // 2
            x = (table.start[j] + table.end[j]) / 2
            assert (
                table.find(row, x, 0.0) == j
                or table.start[table.find(row, x, 0.0)] <= x <= table.end[table.find(row, x, 0.0)]
            )
    assert table.nbytes / len(table) < 40


@pytest.mark.parametrize("seed", range(6))
def test_row_order_is_the_full_sort_by_row_then_start(seed: int) -> None:
    """The quick stable sort by row is only kept when it equals lexsort((start, key)), ties included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    lane = rng.integers(0, [3, 8, 300, 2, 5, 40][seed], n).astype(np.int32)
    depth = rng.integers(0, [1, 4, 400, 2, 3, 2][seed], n).astype(np.int16)
    start = np.round(rng.uniform(0, 1e6, n))  # many equal starts: ties must keep their order
    if seed % 2 == 0:  # loaded events: in start order per lane
        start = np.sort(start)
    key = lane.astype(np.int64) * 65536 + depth.astype(np.int64)
    assert np.array_equal(row_order(lane, depth, key, start), np.lexsort((start, key)))
