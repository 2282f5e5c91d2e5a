"""The headless side of the app's what-if workflow: knob text, sessions, scenario summaries, the
delta table, sweeps and the why of a predicted task -- on the synthetic demo job (no shared traces)."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from lumos_core.errors import ConfigError
from lumos_core.graph.build import build_graph
from lumos_core.replay.run import replay
from lumos_core.sweep.grid import default_values, parse_values
from lumos_core.sweep.run import run_axis
from lumos_core.synth.demo import demo_job_path
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Kind
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.knobs import coerce_changes, format_changes, parse_changes
from lumos_core.whatif.scenario import (
    compare,
    explain_task,
    summarize_estimate,
    summarize_replay,
    traced_sources,
)
from lumos_core.whatif.session import ScenarioSpec, Session, SessionError, load_session, save_session

# ---------------------------------------------------------------- knobs


def test_changes_parse_with_their_types_and_round_trip() -> None:
    got = parse_changes("dp=16, gpu=H200,nvlink-gbps=900 ,micro_batch=2")
    assert got == {"dp": 16, "gpu": "H200", "nvlink_gbps": 900.0, "micro_batch": 2}
    assert isinstance(got["nvlink_gbps"], float)
    assert parse_changes(format_changes(got)) == got
    assert format_changes({"pp": 4, "dp": 2}) == "dp=2,pp=4"  # KNOBS order


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dq=16", "unknown knob 'dq'"),
        ("dp=sixteen", "dp must be a whole number"),
        ("dp", "expected KNOB=VALUE"),
        ("", "no change given"),
        ("nvlink_gbps=fast", "nvlink_gbps must be a number"),
    ],
)
def test_bad_changes_name_the_knob(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_changes(text)


def test_json_numbers_coerce_but_fractions_of_ints_do_not() -> None:
    assert coerce_changes({"dp": 16.0, "layers": None}) == {"dp": 16}
    with pytest.raises(ConfigError):
        coerce_changes({"dp": 16.5})


# ---------------------------------------------------------------- sessions


def test_session_round_trips_and_finds_moved_traces(tmp_path) -> None:
    traces = tmp_path / "run" / "traces"
    traces.mkdir(parents=True)
    s = Session(
        str(traces),
        baseline_overrides={"layers": 12},
        scenarios=[ScenarioSpec("baseline replay", "replay"), ScenarioSpec("wide", "estimate", {"dp": 16})],
        view={"selected": "wide", "overlay": "paired"},
    )
    path = save_session(s, tmp_path / "run" / "a.lumos.json")
    doc = orjson.loads(path.read_bytes())
    assert doc["format"] == "lumos-session" and doc["trace"]["relative"] == "traces"
    back = load_session(path)
    assert back == s
    # move the folder: the relative path still finds the traces
    moved = tmp_path / "moved"
    (tmp_path / "run").rename(moved)
    assert load_session(moved / "a.lumos.json").trace_path == str((moved / "traces").resolve())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not a JSON file"),
        (b'{"format": "other"}', "not a Lumos session"),
        (b'{"format": "lumos-session", "version": 99, "trace": {"demo": true}}', "newer than this Lumos"),
        (b'{"format": "lumos-session", "version": 1, "trace": {}}', 'has no "path"'),
        (
            b'{"format": "lumos-session", "version": 1, "trace": {"demo": true}, "scenarios": [{"kind": "guess"}]}',
            "kind must be one of",
        ),
        (
            b'{"format": "lumos-session", "version": 1, "trace": {"demo": true}, "scenarios": [{"changes": {"dp": "x"}}]}',
            "scenario 1: dp must be a whole number",
        ),
        (
            b'{"format": "lumos-session", "version": 1, "trace": {"demo": true}, "baseline_overrides": {"dp": 2}}',
            "cannot set dp",
        ),
    ],
)
def test_bad_sessions_say_what_is_wrong(tmp_path, content: bytes, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    with pytest.raises(SessionError, match=message):
        load_session(path)


def test_missing_session_file(tmp_path) -> None:
    with pytest.raises(SessionError, match="no such session file"):
        load_session(tmp_path / "nope.json")


# ---------------------------------------------------------------- scenarios on the demo job


@pytest.fixture(scope="module")
def demo(tmp_path_factory):  # type: ignore[no-untyped-def]
    job = load_job(demo_job_path(root=tmp_path_factory.mktemp("demo")))
    return job, infer_baseline(job), build_graph(job)


def test_replay_scenario_has_the_replay_errors_and_estimator_outcomes(demo) -> None:
    job, baseline, graph = demo
    r = replay(job, graph=graph, critical_paths=False)
    s = summarize_replay(job, r, baseline)
    assert s.kind == "replay" and s.name == "baseline replay" and s.changes == {}
    assert s.replay_error_pct == pytest.approx(r.mean_abs_error_pct)
    assert len(s.iterations) == sum(len(x.iterations) for x in r.ranks)
    assert [row.diff_pct for row in s.iterations] == [it.error_pct for x in r.ranks for it in x.iterations]
    # the identity estimate replays the same graph: the same iteration time
    e = estimate(job, {}, baseline=baseline, graph=graph)
    assert s.iteration_us == pytest.approx(e.replayed.iteration_us)
    assert s.measured.iteration_us == pytest.approx(e.measured.iteration_us)


def test_estimate_scenario_numbers_are_the_estimate_result(demo) -> None:
    job, baseline, graph = demo
    e = estimate(job, {"dp": 4}, baseline=baseline, graph=graph)
    s = summarize_estimate(job, e, {"dp": 4})
    assert s.name == "DP 4" and s.world_size == 16
    assert s.iteration_us == e.predicted.iteration_us
    assert s.predicted.breakdown == e.predicted.breakdown
    assert s.estimate_json == e.as_dict()
    assert s.change_pct == pytest.approx(e.as_dict()["predicted"]["change_pct"], abs=1e-3)
    assert s.represents == e.represents and len(s.represents) == 8
    # every simulated rank comes from the traced rank with the same events
    src = traced_sources(job, e.timeline)
    assert src == list(range(8))
    assert all(len(p) == len(job.ranks[i]) for p, i in zip(e.timeline, src))
    rows0 = [r for r in s.iterations if r.rank == 0]
    expected = ", ".join(map(str, e.represents[0]))
    assert rows0 and rows0[0].stands_for == expected and not math.isnan(rows0[0].measured_ms)
    tables = s.tables()
    assert set(tables) == {"iterations", "breakdown", "retimed"}
    assert tables["retimed"][0] == e.retimed and tables["iterations"][0] == s.iterations


def test_compare_lists_iteration_breakdown_and_collective_deltas(demo) -> None:
    job, baseline, graph = demo
    a = summarize_replay(job, replay(job, graph=graph, critical_paths=False), baseline)
    e = estimate(job, {"dp": 4}, baseline=baseline, graph=graph)
    b = summarize_estimate(job, e, {"dp": 4})
    rows = compare(a, b)
    by = {(r.section, r.item): r for r in rows}
    it = by[("iteration", "iteration time")]
    assert it.a == pytest.approx(a.iteration_us / 1000) and it.b == pytest.approx(b.iteration_us / 1000)
    assert it.delta == pytest.approx(it.b - it.a)
    assert by[("iteration", "GPUs")].delta == 8
    parts = [r for r in rows if r.section == "breakdown"]
    assert sum(r.b for r in parts) == pytest.approx(b.predicted.breakdown.total_ns / 1e6, rel=1e-6)
    # DP 2 -> 4 changes only collectives: no kernel moves, the data-parallel collectives take longer
    assert not [r for r in rows if r.section == "kernel"]
    colls = {r.item: r for r in rows if r.section == "collective"}
    assert colls and max(r.delta for r in colls.values()) > 0


def test_sweep_points_equal_single_estimates_and_keep_bad_values(demo) -> None:
    job, baseline, graph = demo
    points = run_axis(job, "dp", [2, 4], baseline=baseline, graph=graph).rows
    single = estimate(job, {"dp": 4}, baseline=baseline, graph=graph)
    assert [p.changes["dp"] for p in points] == [2, 4] and all(p.ok for p in points)
    assert points[1].iteration_us == single.predicted.iteration_us
    assert points[0].change_pct == pytest.approx(0.0, abs=1e-9)
    bad = run_axis(job, "pp", [3], baseline=baseline, graph=graph).rows
    assert not bad[0].ok and "8 layers do not divide into 3" in bad[0].note
    rows = points + bad
    assert rows[0].world_size == 8 and math.isnan(rows[-1].iteration_us)


def test_sweep_values() -> None:
    assert default_values("dp", 8) == [8, 16, 32, 64, 128, 256, 512]
    assert default_values("hidden", 768) == [384, 768, 1536, 3072]
    assert parse_values("dp", "8-64") == [8, 16, 32, 64]
    assert parse_values("gpu", "H100, B200") == ["H100", "B200"]


def test_explain_says_which_model_retimed_a_task_and_what_it_waited_for(demo) -> None:
    job, baseline, graph = demo
    e = estimate(job, {"dp": 4}, baseline=baseline, graph=graph)
    t = job.ranks[0]
    why = [dict(explain_task(e, 0, int(ev)))["Duration"] for ev in t.collectives.event]
    dp = [w for w in why if w.startswith("DP ")]
    assert dp and all("NCCL " in w and "group 2 -> 4" in w and "-> predicted" in w for w in dp)
    kernel = int(np.flatnonzero(t.kind == Kind.KERNEL)[10])
    assert dict(explain_task(e, 0, kernel))["Duration"].startswith("measured duration kept")
    r = replay(job, graph=graph, critical_paths=False)
    lines = dict(explain_task(r, 0, kernel))
    assert lines["Duration"].startswith("measured duration kept")
    assert "rank 0" in lines["Starts after"]


def test_the_app_may_reuse_one_graph_for_every_run(demo) -> None:
    """The app builds the execution graph once per job and passes it to every replay and estimate:
    no run (structural rewrites included) may change it."""
    job, baseline, graph = demo
    before = {k: getattr(graph, k).copy() for k in ("dur", "anchor", "order", "sp_src", "sp_lag", "ep_src")}
    estimate(job, {"pp": 4}, baseline=baseline, graph=graph)
    estimate(job, {"hidden": 2048}, baseline=baseline, graph=graph)
    replay(job, graph=graph, scale={"gemm": 2.0}, critical_paths=False)
    assert all(np.array_equal(v, getattr(graph, k)) for k, v in before.items())
    again = estimate(job, {"dp": 4}, baseline=baseline, graph=graph).predicted.iteration_us
    fresh = estimate(job, {"dp": 4}, baseline=baseline, graph=build_graph(job)).predicted.iteration_us
    assert again == fresh
