"""The API's front-end modules (docs/api.md, "Modules for front ends") give what ``lumos_core.open``'s
Job gives, step by step: the app's scenarios and one-knob sweeps are the CLI's figures."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from conftest import REPO

import lumos_core
from lumos_core.api import Estimator
from lumos_core.api.loading import build_graph, load_job, warm_up
from lumos_core.api.scenarios import estimate_scenario, replay_scenario
from lumos_core.api.sweep import sweep_axis

DATA = REPO / "tests" / "data" / "cpu-gpt" / "base"
TIMING = {"seconds", "simulate_seconds", "tasks_per_second"}


def _untimed(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _untimed(v) for k, v in d.items() if k not in TIMING}
    if isinstance(d, list):
        return [_untimed(v) for v in d]
    return d


@pytest.fixture(scope="module")
def job() -> lumos_core.Job:
    return lumos_core.open(DATA, workers=1)


@pytest.fixture(scope="module")
def estimator() -> Estimator:
    data = load_job(DATA, workers=1)
    return Estimator(data, graph=build_graph(data))


def test_estimate_scenario_is_the_jobs_estimate(job: lumos_core.Job, estimator: Estimator) -> None:
    said: list[str] = []
    summary, result = estimate_scenario(estimator, {"dp": 2}, progress=lambda _f, m: said.append(m))
    assert _untimed(result.as_dict()) == _untimed(job.estimate(dp=2).result.as_dict())
    assert summary.name and summary.changes == {"dp": 2}
    assert "summarising the prediction" in said


def test_replay_scenario_is_the_jobs_replay(job: lumos_core.Job, estimator: Estimator) -> None:
    summary, result = replay_scenario(estimator.job, estimator.graph, estimator.baseline)
    replayed = job.replay(holdout=False).result
    assert result.mean_abs_error_pct == replayed.mean_abs_error_pct
    assert [(it.name, it.replayed.length) for r in result.ranks for it in r.iterations] == [
        (it.name, it.replayed.length) for r in replayed.ranks for it in r.iterations
    ]
    assert summary.name == "baseline replay"


def test_sweep_axis_rows_are_the_jobs_sweep_with_the_estimators_replay_reused(
    job: lumos_core.Job, estimator: Estimator
) -> None:
    estimated: list[Any] = []
    own = estimator.estimate

    def counted(config: Any, **kw: Any) -> Any:
        estimated.append(config)
        return own(config, **kw)

    estimator.estimate = counted  # type: ignore[method-assign]
    try:
        rows = sweep_axis(estimator, "dp", [1, 2, 3]).rows
    finally:
        del estimator.estimate
    assert len(estimated) == sum(r.estimated for r in rows) >= 2  # the kept estimator did the points
    grid = job.sweep("dp=1,2,3").result.rows

    def plain(row: Any) -> dict[str, Any]:
        d = dataclasses.asdict(row)
        d.pop("seconds")
        return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}

    assert [plain(r) for r in rows] == [plain(r) for r in grid]
    assert [r.status for r in rows][:2] == ["ok", "ok"]


def test_build_graph_says_it_warms_up_first() -> None:
    warm_up()  # idempotent: nothing left to say after
    data = load_job(DATA, workers=1)
    said: list[str] = []
    graph = build_graph(data, progress=lambda _f, m: said.append(m))
    assert said[0] == "building the execution graph" and graph.n_nodes > 0
    kept = build_graph(data, keep_stalls=True)
    assert kept.n_nodes == graph.n_nodes
