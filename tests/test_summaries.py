"""Summary tables (top kernels, collectives with bus bandwidth and skew, iterations, clocks) on real traces."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.replay.breakdown import rank_breakdowns
from lumos_core.replay.summaries import (
    CollectiveStat,
    bus_factor,
    clock_table,
    collectives_table,
    family_totals,
    iteration_table,
    rank_breakdown_table,
    top_kernels,
    write_csv,
)
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import CollectiveKind, Kind

pytestmark = needs_shared


@pytest.fixture(scope="module")
def nanogpt():
    return load_job(shared("h100-nanogpt-8rank"))


def test_bus_factors_are_nccl_tests_factors() -> None:
    assert bus_factor(CollectiveKind.ALL_REDUCE, 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor(CollectiveKind.REDUCE_SCATTER, 8) == pytest.approx(7 / 8)
    assert bus_factor(CollectiveKind.ALL_TO_ALL, 4) == pytest.approx(3 / 4)
    assert bus_factor(CollectiveKind.BROADCAST, 8) == 1.0
    assert bus_factor(CollectiveKind.ALL_REDUCE, 1) == 0.0  # one rank moves nothing (as NCCL-tests reports)


def test_top_kernels_of_rank0_sum_to_its_gpu_time(nanogpt) -> None:
    r0 = nanogpt.rank(0)
    rows = top_kernels(nanogpt, 0, limit=None)
    act = np.isin(r0.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    assert sum(r.count for r in rows) == int(act.sum()) == 2917 + 542 + 353
    assert sum(r.total_ns for r in rows) == int(r0.dur[act].sum())
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert [r.total_ns for r in rows] == sorted((r.total_ns for r in rows), reverse=True)
    top = rows[0]
    # the AllGather kernel is rank 0's biggest GPU consumer: 38 launches
    assert (
        top.name.startswith("ncclDevKernel_AllGather") and top.count == 38 and top.family == "NCCL AllGather"
    )
    names = r0.name[act & (r0.name == r0.string_id(top.name))]
    assert top.total_ns == int(r0.dur[act & (r0.name == r0.string_id(top.name))].sum())
    assert len(names) == 38
    assert top.min_ns <= top.mean_ns <= top.max_ns


def test_job_top_kernels_add_up_every_rank(nanogpt) -> None:
    rows = top_kernels(nanogpt, None, limit=None)
    total = sum(
        int(t.dur[np.isin(t.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])].sum()) for t in nanogpt.ranks
    )
    assert sum(r.total_ns for r in rows) == total
    ag = next(r for r in rows if r.name.startswith("ncclDevKernel_AllGather"))
    # ranks 4-7 hold a few more collectives at the edges of their profiling window
    expected = sum(int((t.name == t.string_id(ag.name)).sum()) for t in nanogpt.ranks)
    assert ag.ranks == 8 and ag.count == expected == 320
    fams = {f.family: f for f in family_totals(nanogpt, 0)}
    assert fams["GEMM / conv"].count == 808 and fams["NCCL ReduceScatter"].count == 38


def test_collectives_table_has_every_instance_with_sizes_durations_and_skew(nanogpt) -> None:
    rows = collectives_table(nanogpt)
    match = nanogpt.collective_match
    assert len(rows) == match.n_instances == 84
    assert {r.kind for r in rows} == {"ReduceScatter", "AllGather"}
    # Complete instances first, in order of start; those the profiling window cuts (a rank lacks
    # them or launched them before the window: no size recorded) after them.
    cut = [r.cut_off for r in rows]
    assert cut == sorted(cut) and 8 <= sum(cut) < len(rows)
    for part in ([r for r in rows if not r.cut_off], [r for r in rows if r.cut_off]):
        assert [r.start_ns for r in part] == sorted(r.start_ns for r in part)
    assert all(r.size_bytes >= 0 for r in rows if not r.cut_off)
    assert all(r.cut_off for r in rows if r.ranks < r.group_size)
    full = [r for r in rows if r.ranks == 8]
    assert len(full) == 76
    for r in rows:
        assert r.dur_min_ns <= r.dur_median_ns <= r.dur_max_ns
        assert r.skew_ns >= 0 and r.group_size == 8
    # check one big ReduceScatter against the rank tables directly
    big = next(r for r in rows if r.kind == "ReduceScatter" and r.size_bytes == 77266944)
    starts, durs = [], []
    for t in nanogpt.ranks:
        rows_t = np.flatnonzero(match.instance[t.rank] == big.instance)
        assert len(rows_t) == 1
        ev = t.collectives.event[rows_t[0]]
        starts.append(int(t.start[ev]))
        durs.append(int(t.dur[ev]))
    assert big.dur_min_ns == min(durs) and big.dur_max_ns == max(durs)
    assert big.skew_ns == max(starts) - min(starts)
    assert big.start_ns == min(starts)
    assert big.bus_bw_gbps == pytest.approx(77266944 * 7 / 8 / min(durs))
    # H100 NVLink: a 77 MB ReduceScatter runs at a few hundred GB/s of bus bandwidth
    assert 150 < big.bus_bw_gbps < 450
    unknown = [r for r in rows if r.size_bytes < 0]
    assert unknown and all(math.isnan(r.bus_bw_gbps) for r in unknown)


def test_iteration_table_is_the_breakdown_of_every_rank(nanogpt) -> None:
    rows = iteration_table(nanogpt)
    assert len(rows) == 8 * 4
    r0 = [r for r in rows if r.rank == 0]
    assert [r.iteration for r in r0] == [f"ProfilerStep#{i}" for i in range(10, 14)]
    ref = rank_breakdowns(nanogpt.rank(0))
    for row, (w, b) in zip(r0, ref):
        assert row.start_ns == w.start and row.dur_ns == w.length
        assert row.exposed_compute_ns == b.exposed_compute_ns and row.other_ns == b.other_ns
        assert row.exposed_compute_ns + row.overlapped_ns + row.exposed_comm_ns + row.other_ns == row.dur_ns
    per_rank = rank_breakdown_table(rows)
    assert [p.rank for p in per_rank] == list(range(8))
    assert per_rank[0].iterations == 4
    assert per_rank[0].mean_iteration_ns == pytest.approx(sum(r.dur_ns for r in r0) / 4)


def test_clock_table_reports_offsets_of_every_rank(nanogpt) -> None:
    rows = clock_table(nanogpt)
    assert [r.rank for r in rows] == list(range(8))
    assert rows[0].reference and not rows[1].reference
    # one host: offsets are within NCCL exit skew, so nothing was applied
    assert all(r.applied_offset_ns == 0 for r in rows)
    assert all(abs(r.estimated_offset_ns) < 20_000 for r in rows)
    assert rows[0].anchors == 76


def test_write_csv_round_trips_a_table(nanogpt, tmp_path) -> None:
    rows = collectives_table(nanogpt)
    path = tmp_path / "collectives.csv"
    write_csv(rows, path)
    with path.open() as fh:
        read = list(csv.DictReader(fh))
    assert len(read) == len(rows)
    assert read[0]["kind"] == rows[0].kind
    assert int(read[-1]["dur_max_ns"]) == rows[-1].dur_max_ns
    assert any(r["bus_bw_gbps"] == "" for r in read)  # unknown sizes: empty, not "nan"
    empty = tmp_path / "empty.csv"
    write_csv([], empty, CollectiveStat)
    assert empty.read_text().startswith("instance,kind,group,size_bytes")
