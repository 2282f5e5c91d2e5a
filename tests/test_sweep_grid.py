"""Grid sweeps in the core: grid syntax, the task every engine runs (equal to ``estimate``), the
process pool, skipped rows with their reason, tokens/s, and the results file with resume -- on the
synthetic demo job (TP 2, PP 2, DP 2; every knob works on it)."""

from __future__ import annotations

import math

import pytest

from lumos_core.errors import Cancelled, ConfigError
from lumos_core.graph.build import build_graph
from lumos_core.sweep.engines import LocalEngine, SweepContext, make_engine
from lumos_core.sweep.grid import axis_grid, invalid_reason, parse_grid
from lumos_core.sweep.point import SKIPPED, TOKENS_UNKNOWN, estimate_point, point_key
from lumos_core.sweep.results import ResultsFile, columns_for
from lumos_core.sweep.run import run_axis, run_grid
from lumos_core.synth.demo import demo_job_path
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.estimate import estimate

# 6 points: 4 valid, PP 3 (8 layers do not split into 3 stages) skipped twice
GRID = "dp=2,4 pp=1,2,3"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):  # type: ignore[no-untyped-def]
    job = load_job(demo_job_path(root=tmp_path_factory.mktemp("demo")))
    return job, infer_baseline(job), build_graph(job)


@pytest.fixture(scope="module")
def pool_rows(demo):  # type: ignore[no-untyped-def]
    job, baseline, graph = demo
    return run_grid(job, parse_grid(GRID), LocalEngine(2), baseline=baseline, graph=graph).rows


# ---------------------------------------------------------------- grid syntax


def test_the_issue_grid_is_36_typed_configurations_first_knob_slowest() -> None:
    g = parse_grid("dp=8,16,32,64 pp=1,2,4 microbatches=4,8,16", {"gpu": "H100"})
    assert g.knobs == {"dp": [8, 16, 32, 64], "pp": [1, 2, 4], "microbatches": [4, 8, 16]}
    assert g.size == 36 and g.columns == ["dp", "pp", "microbatches", "gpu"]
    points = g.points()
    assert len(points) == 36
    assert points[0] == {"gpu": "H100", "dp": 8, "pp": 1, "microbatches": 4}
    assert points[1]["microbatches"] == 8 and points[-1] == {
        "gpu": "H100",
        "dp": 64,
        "pp": 4,
        "microbatches": 16,
    }
    assert point_key(points[0]) == "dp=8,pp=1,microbatches=4,gpu=H100"


def test_grid_values_ranges_spaces_and_repeats() -> None:
    g = parse_grid("dp=8-64;  gpu=H100,A100 nvlink-gbps=450, 900 hidden=768,768")
    assert g.knobs == {
        "dp": [8, 16, 32, 64],
        "gpu": ["H100", "A100"],
        "nvlink_gbps": [450.0, 900.0],
        "hidden": [768],
    }
    assert isinstance(g.knobs["nvlink_gbps"][0], float) and g.size == 16


@pytest.mark.parametrize(
    "text, fixed, message",
    [
        ("dpp=8,16", None, "unknown knob 'dpp'"),
        ("dp=8 dp=16", None, "dp is given twice"),
        ("dp=", None, "dp has no values"),
        ("dp=8.5", None, "dp must be a whole number"),
        ("8,16", None, "is not KNOB=VALUES"),
        ("", None, "nothing to sweep"),
        ("gpu=H100,A100", {"gpu": "H200"}, "gpu both swept in the grid and fixed"),
    ],
)
def test_bad_grids_say_what_is_wrong(text: str, fixed: dict | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_grid(text, fixed)


# ---------------------------------------------------------------- the task and the pool


def test_a_point_equals_the_estimate_of_the_same_changes(demo) -> None:
    job, baseline, graph = demo
    changes = {"dp": 4, "pp": 4, "microbatches": 8}
    row = estimate_point(job, graph, baseline, changes)
    r = estimate(job, changes, baseline=baseline, graph=graph)
    assert row.ok and row.world_size == r.world_size == 2 * 4 * 4
    assert row.iteration_us == r.predicted.iteration_us
    assert row.breakdown == r.predicted.breakdown
    assert row.change_pct == 100 * (r.predicted.iteration_us / r.replayed.iteration_us - 1)
    # tokens per iteration = micro-batch 1 x seq 2048 x 8 microbatches x DP 4, per GPU of 32
    assert row.tokens_per_s_per_gpu == pytest.approx(1 * 2048 * 8 * 4 / (r.predicted.iteration_us / 1e6) / 32)
    assert row.note == ""


def test_the_pool_gives_the_rows_of_the_task_run_here_in_grid_order(demo, pool_rows) -> None:
    job, baseline, graph = demo
    points = parse_grid(GRID).points()
    assert [r.changes for r in pool_rows] == points
    for row, changes in zip(pool_rows, points):
        assert row.same_numbers(estimate_point(job, graph, baseline, changes)), changes


def test_invalid_combinations_are_skipped_rows_with_the_reason(demo, pool_rows) -> None:
    _, baseline, _ = demo
    skipped = [r for r in pool_rows if not r.ok]
    assert [r.changes["pp"] for r in skipped] == [3, 3]
    for r in skipped:
        assert r.status == SKIPPED and math.isnan(r.iteration_us) and r.breakdown is None
        assert "8 layers do not divide into 3 pipeline stages" in r.note
        assert r.note == invalid_reason(baseline, r.changes)
        assert r.world_size == r.changes["dp"] * 2 * 3
    assert sum(r.ok for r in pool_rows) == 4


def test_a_one_knob_sweep_is_the_one_axis_grid(demo, pool_rows) -> None:
    """run_axis (the app's Sweep tab) gives the rows the process pool gives for the same points."""
    job, baseline, graph = demo
    report = run_axis(job, "pp", [1, 2, 3], fixed={"dp": 4}, baseline=baseline, graph=graph)
    assert report.grid == axis_grid("pp", [1, 2, 3], {"dp": 4}) and report.engine == "in-process"
    pool = {r.key: r for r in pool_rows}
    assert [r.key for r in report.rows] == ["dp=4,pp=1", "dp=4,pp=2", "dp=4,pp=3"]
    for row in report.rows:
        assert row.same_numbers(pool[row.key]), row.key
    assert [r.ok for r in report.rows] == [True, True, False]


def test_cancelling_a_one_knob_sweep_stops_inside_an_estimate(demo) -> None:
    job, baseline, graph = demo
    calls: list[str] = []

    def progress(fraction: float, message: str) -> None:
        calls.append(message)
        if len(calls) > 3:  # past the start: inside the first estimate
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        run_axis(job, "dp", [2, 4, 8], baseline=baseline, graph=graph, progress=progress)
    assert not any("1/3 configurations" in m for m in calls), calls


def test_tokens_unknown_without_micro_batch_and_seq(demo) -> None:
    job, baseline, graph = demo
    from dataclasses import replace

    blind = replace(baseline, config=replace(baseline.config, micro_batch=None))
    row = estimate_point(job, graph, blind, {"dp": 4})
    assert row.ok and math.isnan(row.tokens_per_s_per_gpu) and row.note == TOKENS_UNKNOWN


def test_engine_choice_is_checked() -> None:
    from lumos_core.errors import LumosError

    with pytest.raises(LumosError, match="--jobs must be at least 1"):
        make_engine("local", 0)
    with pytest.raises(LumosError, match="--address is for --engine ray"):
        make_engine("local", 1, "auto")
    assert make_engine("local", 3).workers == 3


def test_closing_a_run_early_stops_its_workers(demo) -> None:
    import multiprocessing

    job, baseline, graph = demo
    gen = LocalEngine(2).run(SweepContext(job, graph, baseline), [{"dp": d} for d in (2, 4, 8, 16, 32, 64)])
    _, first = next(gen)
    assert first.ok
    gen.close()
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


# ---------------------------------------------------------------- results file and resume


def test_an_interrupted_sweep_resumes_from_its_results_file(demo, pool_rows, tmp_path) -> None:
    job, baseline, graph = demo
    grid = parse_grid(GRID)
    out = tmp_path / "results.csv"
    seen: list[str] = []

    def stop_after_two(fraction: float, message: str) -> None:
        if fraction > 0 and fraction < 1 and len(seen) >= 2:
            raise Cancelled("stop")

    with ResultsFile(out, grid.columns) as results, pytest.raises(Cancelled):
        run_grid(
            job,
            grid,
            LocalEngine(1),
            baseline=baseline,
            graph=graph,
            results=results,
            progress=stop_after_two,
            on_row=lambda r: seen.append(r.key) if r.ok else None,
        )
    kept = out.read_text().splitlines()
    assert kept[0].split(",") == columns_for(grid.columns)
    assert len(kept) == 1 + 2 + 2  # header, the two skipped rows (never sent to a worker), two estimates
    # a hard stop in the middle of a write leaves a partial row: it is dropped and estimated again
    with out.open("a") as fh:
        fh.write('"dp=4,pp=2",4,2,16,ok,12.')
    with ResultsFile(out, grid.columns) as results:
        assert set(results.done) == set(seen) | {"dp=2,pp=3", "dp=4,pp=3"}
        report = run_grid(job, grid, LocalEngine(1), baseline=baseline, graph=graph, results=results)
    assert report.resumed == 4 and report.estimated == 2 and report.skipped == 0
    assert all(a.same_numbers(b) for a, b in zip(report.rows, pool_rows))
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 6 and len({line.split('"')[1] for line in lines[1:]}) == 6
    # read back from the file, the rows have the numbers of the run that wrote them
    with ResultsFile(out, grid.columns) as results:
        again = run_grid(job, grid, LocalEngine(1), baseline=baseline, graph=graph, results=results)
    assert again.estimated == 0 and again.resumed == 6
    for a, b in zip(again.rows, pool_rows):
        assert a.changes == b.changes and a.status == b.status and a.breakdown == b.breakdown
        assert a.iteration_us == pytest.approx(b.iteration_us, rel=1e-15) or not a.ok


def test_a_results_file_of_another_grid_is_refused(tmp_path) -> None:
    out = tmp_path / "r.csv"
    ResultsFile(out, ["dp", "pp"]).close()
    with pytest.raises(ConfigError, match="holds the results of another sweep"):
        ResultsFile(out, ["dp", "gpu"])
    ResultsFile(out, ["dp", "gpu"], restart=True).close()
    assert out.read_text().startswith("config,dp,gpu,world_size")


def test_the_pareto_front_keeps_what_nothing_beats_on_gpus_and_time() -> None:
    from lumos_core.sweep.point import OK, GridRow
    from lumos_core.sweep.results import pareto_front

    def row(gpus: int, ms: float, status: str = OK) -> GridRow:
        return GridRow({"dp": gpus}, gpus, status, iteration_us=ms * 1000)

    rows = [row(16, 50), row(8, 90), row(8, 80), row(32, 50), row(64, 20), row(16, 70), row(4, 10, SKIPPED)]
    # 8 GPUs: 80 ms beats 90; 16: 50; 32 is no faster than 16 with fewer GPUs; 64: 20; skipped rows never count
    assert pareto_front(rows) == [2, 0, 4]
    assert pareto_front([]) == []
