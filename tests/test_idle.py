"""Idle/stall attribution: every GPU stream's idle time, per iteration, split by cause."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needs_shared, run_lumos, shared

from lumos_core.graph.build import build_graph
from lumos_core.replay.breakdown import iteration_windows
from lumos_core.replay.idle import CAUSES, IdleReport, idle_attribution
from lumos_core.replay.intervals import clip, total
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Kind

pytestmark = needs_shared

_ACTIVITY = [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]


def measured_idle(t, stream: int, window) -> int:  # type: ignore[no-untyped-def]
    lane = next(ln for ln in t.lanes if ln.is_gpu and ln.stream == stream)
    sl = t.lane_slice(lane.index)
    act = np.isin(t.kind[sl], _ACTIVITY)
    s, e = clip(t.start[sl][act], t.end[sl][act], window.start, window.end)
    return window.length - total(s, e)


@pytest.fixture(scope="module")
def nanogpt():
    job = load_job(shared("h100-nanogpt-8rank"), workers=1)
    return job, idle_attribution(build_graph(job))


def test_causes_add_up_to_measured_idle_per_stream(nanogpt) -> None:
    job, rep = nanogpt
    assert len(rep.rows) == sum(len([ln for ln in t.lanes if ln.is_gpu]) for t in job.ranks) * 4
    for r in rep.rows:
        t = job.rank(r.rank)
        w = next(x for x in iteration_windows(t) if x.name == r.iteration)
        want = measured_idle(t, r.stream, w)
        got = sum(r.causes[c] for c in CAUSES)
        assert abs(got - want) <= 0.01 * max(want, 1), (r.rank, r.stream, r.iteration, got, want)
        assert all(v >= 0 for v in r.causes.values())


def test_nanogpt_idle_has_host_event_and_peer_waits(nanogpt) -> None:
    _job, rep = nanogpt
    totals = {c: sum(r.causes[c] for r in rep.rows) for c in CAUSES}
    # NCCL streams wait for the compute stream's events, compute streams for their launches, and
    # collectives for the slowest rank: each cause is present on this job.
    assert totals["host"] > 0 and totals["event"] > 0 and totals["peer"] > 0
    u = rep.unexplained_summary()
    assert u["count"] == len(rep.delays) > 0
    assert u["largest"]["us"] == max(d.length for d in rep.delays) / 1000


def test_periodic_unexplained_delays_are_found() -> None:
    from lumos_core.replay.idle import Delay

    every = [Delay(0, 7, 1_000_000 * i, 50_000, "k") for i in range(6)]
    assert IdleReport([], every).unexplained_summary()["periodic"][0]["period_us"] == 1000.0
    jitter = [Delay(0, 7, s, 50_000, "k") for s in (0, 1_000_000, 1_200_000, 3_500_000, 3_600_000)]
    assert IdleReport([], jitter).unexplained_summary()["periodic"] == []


def test_replay_idle_json_and_keep_stalls(tmp_path) -> None:
    folder = str(shared("a100-ddp-2rank"))
    out = run_lumos("replay", folder, "--json", "--idle", "--no-holdout", "-q", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["idle"] and set(d["idle"][0]) >= {
        "rank",
        "stream",
        "iteration",
        "host_us",
        "event_us",
        "peer_us",
        "sync_us",
        "unexplained_us",
    }
    assert d["stalls_kept"] is False
    kept = run_lumos("replay", folder, "--json", "--keep-stalls", "--no-holdout", "-q", tmp_path=tmp_path)
    k = json.loads(kept.stdout)
    assert k["stalls_kept"] is True
    # delays kept as fixed waits: the GPU starts as measured, closer than without them
    assert k["gpu_start_error_us"]["p95"] <= d["gpu_start_error_us"]["p95"]


def test_estimate_says_whether_stalls_were_kept(tmp_path) -> None:
    folder = str(shared("a100-ddp-2rank"))
    plain = run_lumos("estimate", folder, "--dp", "4", "-q", tmp_path=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "stalls not kept" in plain.stdout
    kept = run_lumos("estimate", folder, "--dp", "4", "--keep-stalls", "--json", "-q", tmp_path=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["stalls_kept"] is True


def test_stalls_note_is_left_out_when_there_is_no_unexplained_delay() -> None:
    from lumos_core.replay.idle import stalls_note

    assert stalls_note(False, 0) is None and stalls_note(True, 10_000) is None
    assert "1.2 ms" in (stalls_note(False, 1_200_000) or "")
    assert (stalls_note(True, 1_200_000) or "").startswith("stalls kept")
