"""Hold-out replay and null models: what the accuracy figures mean, on recorded and real traces.

Targets come from the issue (hold-out mean |iteration error| <= 2 %, GPU start median <= 50 µs,
better than every null model on GPU start); where today's model misses one, the test says so with
an xfail carrying the measured figure instead of a tolerance fitted to it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, run_lumos, shared

from lumos_core.graph.build import build_graph
from lumos_core.replay.evaluate import evaluate_holdout
from lumos_core.replay.holdout import NEVER, group_median, holdout_graph
from lumos_core.replay.null_models import NULL_MODELS
from lumos_core.replay.simulate import simulate
from lumos_core.replay.twins import iterations_of, twin_map
from lumos_core.trace.loader import load_job

CPU_GPT = Path(__file__).parent / "data" / "cpu-gpt" / "base"


@pytest.fixture(scope="module")
def cpu_graph():
    return build_graph(load_job(CPU_GPT, workers=1))


def test_iterations_and_twins_of_a_recorded_cpu_job(cpu_graph) -> None:
    its = iterations_of(cpu_graph)
    assert its.names == [f"ProfilerStep#{n}" for n in range(2, 7)]
    tasks = cpu_graph.node_type <= 1
    assert np.all(its.region[tasks] >= -1)
    # The same program every step: nearly every task of one step has a twin in the next, with its name.
    a, b = 1, 2
    m = twin_map(cpu_graph, its, a, b)
    mine = np.flatnonzero((its.region == a) & tasks)
    assert np.count_nonzero(m[mine] >= 0) >= 0.95 * len(mine)
    t = cpu_graph.job.ranks[0]
    ok = mine[m[mine] >= 0]
    assert np.array_equal(t.name[cpu_graph.event[ok]], t.name[cpu_graph.event[m[ok]]])
    assert np.all(its.region[m[ok]] == b)


def test_holdout_graph_learns_lags_from_other_iterations_only(cpu_graph) -> None:
    its = iterations_of(cpu_graph)
    k = 2
    h = holdout_graph(cpu_graph, its, k)
    g = h.graph
    # earlier iterations are pinned at their measured times, later ones are not
    assert np.all(h.pinned == ((its.region < k) & (its.region >= -1)))
    start, end = simulate(g)
    pin = np.flatnonzero(h.pinned)
    assert np.array_equal(start[pin], cpu_graph.measured_start[pin])
    # no dependency into a pinned task is left, and no "never" lag slips into the full graph
    assert not np.any(h.pinned[g.sp_dst])
    assert not np.any(cpu_graph.sp_lag == NEVER)
    assert np.all(end >= start)


def test_holdout_report_on_a_recorded_cpu_job(cpu_graph) -> None:
    rep = evaluate_holdout(cpu_graph)
    assert rep.available and rep.reason is None
    d = rep.holdout_dict()
    assert d["iterations"] == 5  # all five steps run the same program
    assert d["mean_abs_error_pct"] is not None
    assert d["gpu_start_error_us"] is None  # a CPU-only job has no GPU task to start
    nulls = rep.null_models_dict()
    assert set(nulls) == set(NULL_MODELS)
    assert nulls["persistence"]["mean_abs_error_pct"] is not None


def test_replay_json_has_holdout_and_null_model_keys(tmp_path) -> None:
    out = run_lumos("replay", str(CPU_GPT), "--json", "-q", "--workers", "1", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert "mean_abs_error_pct" in d and "ranks" in d  # existing keys kept
    ho = d["holdout"]
    assert set(ho) >= {"available", "reason", "iterations", "mean_abs_error_pct", "gpu_start_error_us"}
    assert set(d["null_models"]) == {"persistence", "cpu_only", "no_lag", "gpu_only"}
    for m in d["null_models"].values():
        assert set(m) == {"mean_abs_error_pct", "gpu_start_error_us"}
    text = run_lumos("replay", str(CPU_GPT), "-q", "--workers", "1", tmp_path=tmp_path).stdout
    assert "in-sample" in text and "hold-out (5 iterations)" in text and "null: persistence" in text


@needs_shared
def test_single_step_trace_says_holdout_is_not_available() -> None:
    rep = evaluate_holdout(build_graph(load_job(shared("dlrm-v100-8rank"), workers=1)))
    assert not rep.available
    assert "one iteration" in (rep.reason or "")
    assert rep.holdout_dict()["mean_abs_error_pct"] is None


def _report(folder: str):
    return evaluate_holdout(build_graph(load_job(shared(folder), workers=1)))


@pytest.fixture(scope="module")
def nanogpt_report():
    return _report("h100-nanogpt-8rank")


@pytest.fixture(scope="module")
def ddp_report():
    return _report("a100-ddp-2rank")


@needs_shared
@pytest.mark.parametrize("which", ["nanogpt_report", "ddp_report"])
def test_holdout_iteration_error_target(which, request) -> None:
    rep = request.getfixturevalue(which)
    assert rep.available
    assert rep.lumos.mean_abs_error_pct <= 2.0
    # the persistence model is the yardstick: the replay must not be worse than "same as before"
    assert rep.lumos.mean_abs_error_pct <= rep.null_models["persistence"].mean_abs_error_pct


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
@needs_shared
@pytest.mark.parametrize("which", ["nanogpt_report", "ddp_report"])
def test_holdout_gpu_start_beats_the_null_models(which, request) -> None:
    rep = request.getfixturevalue(which)
    ours = rep.lumos.gpu_start_error_us()["median"]
    medians = {name: score.gpu_start_error_us()["median"] for name, score in rep.null_models.items()}
    for name, theirs in medians.items():
        if name != "cpu_only":
            assert ours < theirs, (name, ours, theirs)
    if medians["cpu_only"] == ours:
        pytest.xfail(
            f"{which}: no GPU->CPU dependency binds in these steps, so CPU-only replays exactly "
            f"like Lumos ({ours} µs median): Lumos is not better than this null model here"
        )
    assert ours < medians["cpu_only"]


@needs_shared
@pytest.mark.parametrize("which", ["nanogpt_report", "ddp_report"])
def test_holdout_gpu_start_median_target(which, request) -> None:
    rep = request.getfixturevalue(which)
    assert rep.lumos.gpu_start_error_us()["median"] <= 50


def test_votes_are_grouped_by_dependency_with_their_median() -> None:
    keys = [np.array([1, 1, 1, 2, 2]), np.array([5, 5, 5, 6, 6])]
    _rep, count, median = group_median(keys, np.array([3, 1, 2, 9, 7]))
    assert count.tolist() == [3, 2]
    assert median.tolist() == [2, 8]
