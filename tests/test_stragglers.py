"""Straggler detection (lumos_core.replay.stragglers) on hand-built jobs where one rank computes
longer before every all-reduce: it is flagged, by how much and at which collectives; the others,
and a job without a late rank, are not."""

from __future__ import annotations

from pathlib import Path

import pytest
from straggler_job import write_straggler_job

from lumos_core.replay.stragglers import MIN_LATE_NS, find_stragglers
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import CollectiveKind


def _job(tmp_path: Path, delay_us: float, n: int = 8, late: int = 5):  # type: ignore[no-untyped-def]
    return load_job(write_straggler_job(tmp_path / f"d{delay_us:g}", n, late, delay_us), use_cache=False)


def test_the_delayed_rank_is_flagged_with_its_lateness_and_collectives(tmp_path: Path) -> None:
    rep = find_stragglers(_job(tmp_path, 400.0))
    assert [r.rank for r in rep.flagged] == [5]
    r = rep.flagged[0]
    assert r.n_collectives == 3 and r.n_late == 3
    # it arrives 400 µs after the others (the median arrival): exact on these hand-built times
    assert r.mean_late_ns == pytest.approx(400_000, abs=1_000)
    assert r.max_late_ns == pytest.approx(400_000, abs=1_000)
    assert len(r.worst) == 3 and {c.kind for c in r.worst} == {CollectiveKind.ALL_REDUCE.label}
    assert "late at 3 of 3 collectives" in r.why
    for other in rep.ranks:
        if other.rank != 5:
            assert not other.flagged and other.n_late == 0 and other.max_late_ns <= 1_000


def test_no_straggler_in_a_balanced_job_or_below_the_threshold(tmp_path: Path) -> None:
    assert find_stragglers(_job(tmp_path, 0.0)).flagged == []
    small = find_stragglers(_job(tmp_path, 30.0))
    assert small.threshold_ns >= MIN_LATE_NS > 30_000
    assert small.flagged == []
    assert small.ranks[5].max_late_ns == pytest.approx(30_000, abs=1_000)  # measured, just not flagged


def test_threshold_follows_the_iteration_time(tmp_path: Path) -> None:
    rep = find_stragglers(_job(tmp_path, 400.0))
    # iterations are 2 ms: 1 % is 20 µs, under the 50 µs floor
    assert rep.median_iteration_ns == pytest.approx(2_000_000, rel=0.02)
    assert rep.threshold_ns == MIN_LATE_NS


def test_a_longer_stage_is_not_a_straggler_but_a_late_rank_in_it_is(tmp_path: Path) -> None:
    """Two groups with their own all-reduces (like two pipeline stages); the second group's
    iterations are 500 µs longer for every member: iterations are compared among peers only."""
    folder = write_straggler_job(tmp_path / "stages", 8, 6, 400.0, groups=2, last_group_extra_us=500.0)
    rep = find_stragglers(load_job(folder, use_cache=False))
    assert [r.rank for r in rep.flagged] == [6]
    assert rep.ranks[6].n_late == 3 and rep.ranks[6].n_collectives == 3
    assert all(r.iteration_late_ns == 0 for r in rep.ranks)
