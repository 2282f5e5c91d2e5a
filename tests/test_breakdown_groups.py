"""The iterations chart's aggregation at many ranks: one bar per group (mean of its members) with
the members' spread, and the ranks that compute much longer or shorter than their group labelled."""

from __future__ import annotations

import pytest

from lumos_core.replay.breakdown_groups import consecutive_groups, group_bars
from lumos_core.replay.summaries import RankBreakdownStat


def _row(rank: int, compute_ms: float, comm_ms: float, iterations: int = 2) -> RankBreakdownStat:
    n = iterations
    total = (compute_ms + comm_ms) * n * 1e6
    return RankBreakdownStat(rank, n, total / n, int(compute_ms * n * 1e6), 0, int(comm_ms * n * 1e6), 0)


def test_groups_average_their_members_and_the_slow_rank_is_labelled() -> None:
    # 64 ranks: compute 10 ms ± a little jitter, waiting fills the rest of a 12 ms iteration;
    # rank 37 computes 11 ms (and waits 1 ms)
    rows = [_row(r, 10.0 + 0.01 * (r % 3), 2.0 - 0.01 * (r % 3)) for r in range(64)]
    rows[37] = _row(37, 11.0, 1.0)
    groups = consecutive_groups(range(64), 4)
    assert [g[0] for g in groups] == ["ranks 0-15", "ranks 16-31", "ranks 32-47", "ranks 48-63"]
    bars = group_bars(rows, groups)
    assert [b.label for b in bars] == [
        "ranks 0-15",
        "ranks 16-31",
        "ranks 32-47",
        "ranks 48-63",
        "rank 37 (outlier)",
    ]
    g2 = bars[2]
    assert g2.ranks == 16
    assert g2.exposed_compute_ns == pytest.approx(sum(_row_c(rows, r) for r in range(32, 48)) / 16)
    assert g2.low_ns == pytest.approx(12e6) and g2.high_ns == pytest.approx(12e6)
    out = bars[-1]
    assert out.outlier and out.exposed_compute_ns == pytest.approx(11e6)


def _row_c(rows: list[RankBreakdownStat], r: int) -> float:
    return rows[r].exposed_compute_ns / rows[r].iterations


def test_no_outlier_within_the_jitter_and_named_stragglers_are_always_shown() -> None:
    rows = [_row(r, 10.0 + 0.01 * (r % 3), 2.0) for r in range(64)]
    groups = consecutive_groups(range(64), 4)
    assert [b.outlier for b in group_bars(rows, groups)] == [False] * 4
    bars = group_bars(rows, groups, flagged={5})
    assert bars[-1].label == "rank 5 (straggler)" and bars[-1].outlier
