"""The public API (docs/api.md): ``lumos_core.open(path) -> Job`` and its results. Each result's
``to_dict()`` is exactly the CLI's ``--json`` object; the job's Estimator replays the traced
configuration once for all its estimates and sweep points; pandas stays optional; the worked
example in docs/examples runs on the shared nanoGPT traces."""

from __future__ import annotations

import runpy
import subprocess
import sys
from typing import Any

import orjson
import pytest
from conftest import REPO, needs_shared, shared

import lumos_core
from lumos_core import cli
from lumos_core.errors import LumosError
from lumos_core.whatif import estimate as estimate_module
from lumos_core.whatif.estimate import estimate

DATA = REPO / "tests" / "data" / "cpu-gpt"
TIMING = {"seconds", "simulate_seconds", "tasks_per_second"}


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main([*argv, "--json", "-q"]) == 0
    return orjson.loads(capsys.readouterr().out)


def _untimed(d: Any) -> Any:
    """``d`` without its run times (they differ run to run)."""
    if isinstance(d, dict):
        return {k: _untimed(v) for k, v in d.items() if k not in TIMING}
    if isinstance(d, list):
        return [_untimed(v) for v in d]
    return d


def _same_json(api: dict[str, Any], cli_doc: dict[str, Any]) -> None:
    # through JSON, as the CLI prints it (tuples become lists, numpy numbers plain)
    opts = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    assert _untimed(orjson.loads(orjson.dumps(api, option=opts))) == _untimed(cli_doc)


@pytest.fixture(scope="module")
def base() -> lumos_core.Job:
    return lumos_core.open(DATA / "base", workers=1)


# The top-level keys of the CLI's --json objects (the commands now print the API's to_dict(), so
# comparing the two alone would not notice a key lost from both).
ESTIMATE_KEYS = ["definition", "iteration_definition", "baseline", "predicted", "retimed", "seconds", "notes",
                 "memory", "throughput", "cpu_paced", "stalls_kept", "synthetic"]  # fmt: skip
REPLAY_KEYS = ["definition", "tasks", "edges", "seconds", "simulate_seconds", "tasks_per_second",
               "mean_abs_error_pct", "measured", "replayed", "unexplained_delay_us", "gpu_start_error_us",
               "scale", "notes", "ranks", "holdout", "null_models", "stalls_kept", "peer_waits", "synthetic",
               "stragglers", "idle",
               "unexplained", "top_unexplained"]  # fmt: skip


def test_estimate_to_dict_is_the_cli_json(base: lumos_core.Job, capsys: pytest.CaptureFixture[str]) -> None:
    got = base.estimate(dp=2, seq=None)
    _same_json(got.to_dict(), _cli_json(capsys, "estimate", str(DATA / "base"), "--dp", "2"))
    assert list(got.to_dict()) == ESTIMATE_KEYS
    assert got.to_dict()["predicted"] == estimate(base.data, {"dp": 2}).as_dict()["predicted"]
    frame = pytest.importorskip("pandas") and got.to_pandas()
    assert list(frame["which"]) == ["measured", "replayed", "predicted"]
    assert frame["gpus"].tolist() == [base.config.world_size] * 2 + [
        2 * base.config.world_size // base.config.dp
    ]


def test_replay_diff_and_validate_to_dict_are_the_cli_json(
    base: lumos_core.Job, capsys: pytest.CaptureFixture[str]
) -> None:
    other = lumos_core.open(DATA / "layers8", workers=1)
    second = base.replay().result.ranks[0].iterations[1].name.split("#")[1]
    replay = base.replay(idle=True, iteration=int(second))
    assert {it["name"] for r in replay.to_dict()["ranks"] for it in r["iterations"]} == {
        f"ProfilerStep#{second}"
    }
    _same_json(
        replay.to_dict(), _cli_json(capsys, "replay", str(DATA / "base"), "--idle", "--iteration", second)
    )
    assert list(replay.to_dict()) == REPLAY_KEYS
    _same_json(
        base.diff(other).to_dict(), _cli_json(capsys, "diff", str(DATA / "base"), str(DATA / "layers8"))
    )
    v = base.validate(other)
    _same_json(v.to_dict(), _cli_json(capsys, "validate", str(DATA / "base"), str(DATA / "layers8")))
    assert v.to_dict()["sample"].startswith("hold-out")


def test_the_estimator_replays_the_baseline_once_for_every_estimate(
    base: lumos_core.Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    replays = []  # one per replay of the traced configuration (what a Reference holds)
    real = estimate_module.Reference

    def counting(*args: Any) -> Any:
        replays.append(1)
        return real(*args)

    monkeypatch.setattr(estimate_module, "Reference", counting)
    job = lumos_core.open(DATA / "base", workers=1)
    first, again = job.estimate(dp=2), job.estimate(dp=4)
    table = job.sweep("dp=2,4,8")
    assert len(replays) == 1, f"the baseline was replayed {len(replays)} times for 5 estimates"
    # the same numbers as a fresh estimate() each
    alone = estimate(job.data, {"dp": 4}, baseline=job.baseline)
    assert again.to_dict()["predicted"] == alone.as_dict()["predicted"]
    assert [r["iteration_ms"] for r in table.rows][:2] == pytest.approx(
        [first.iteration_us / 1000, again.iteration_us / 1000], abs=1e-6
    )


def test_to_pandas_without_pandas_says_how_to_get_it(
    base: lumos_core.Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    with pytest.raises(LumosError, match=r"pip install pandas"):
        base.idle().to_pandas()
    assert "unexplained" in base.idle().to_dict()  # the figures stay available


def test_import_lumos_core_loads_no_engine_and_the_api_on_first_use() -> None:
    code = (
        "import sys, lumos_core\n"
        "print(any(m.startswith(('lumos_core.api', 'lumos_core.whatif', 'pandas')) for m in sys.modules))\n"
        "lumos_core.open\n"
        "print('lumos_core.api' in sys.modules, lumos_core.Job.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "lumos_core.api.job"]


@needs_shared
@pytest.mark.slow
def test_the_worked_example_runs_on_the_nanogpt_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas", reason="the example's tables need pandas (the test extra has it)")
    monkeypatch.setattr(sys, "argv", ["nanogpt_api.py", str(shared("h100-nanogpt-8rank"))])
    ns = runpy.run_path(str(REPO / "docs" / "examples" / "nanogpt_api.py"), run_name="__main__")
    assert ns["job"].config.dp == 8
    assert ns["dp16"].config.dp == 16 and len(ns["dp16"].to_pandas()) == 3
    assert ns["sweep"].to_pandas()["dp"].tolist() == [8, 16, 32, 64]
    assert ns["diff"].to_dict()["b"]["ranks"] == 16
    assert len(ns["idle"]) > 0


def test_the_app_keeps_one_estimator_while_baseline_and_profile_stay(base: lumos_core.Job) -> None:
    pytest.importorskip("PySide6")
    from app.whatif.runner import GraphCache
    from lumos_core.progress import no_progress
    from lumos_core.whatif.baseline import infer_baseline

    cache = GraphCache(base.data, graph=base.graph)
    graph = cache.get(no_progress)
    kept = cache.estimator(graph, base.baseline, None)
    assert cache.estimator(graph, base.baseline, None) is kept
    assert cache.estimator(graph, infer_baseline(base.data, {"layers": 8}), None) is not kept


@needs_shared
def test_lumos_sweep_runs_through_the_api_one_estimate_per_point(capsys: pytest.CaptureFixture[str]) -> None:
    """``lumos sweep --json`` is ``Job.sweep(...).to_dict()``, and each row is what ``lumos estimate``
    predicts for that point, also on a folder that holds one rank of a two-rank job: its collectives
    wait for a peer that is not loaded, and the sweep treats those waits as the API does (it built
    its own graph without that treatment before, 68 ns off the estimate's breakdown here)."""
    one = shared("a100-ddp-2rank")
    job = lumos_core.open(one, workers=1)
    assert job.build_graph() is not None and job.peer_waits.collectives > 0
    grid = "dp=2,4 gpu=A100"
    cli_doc = _cli_json(capsys, "sweep", str(one), "--grid", grid, "--jobs", "1", "--workers", "1")
    _same_json(job.sweep(grid, engine="local", jobs=1).to_dict(), cli_doc)
    for row in cli_doc["rows"]:
        alone = job.estimate(dp=row["dp"], gpu=row["gpu"]).to_dict()["predicted"]
        # the estimate's JSON has µs to 3 decimals: 1 ns
        assert row["iteration_ms"] == pytest.approx(alone["iteration_us"] / 1000, abs=6e-7)
        for k in ("exposed_compute", "overlapped", "exposed_comm", "other"):
            assert row[f"{k}_ms"] == pytest.approx(alone["breakdown"][f"{k}_us"] / 1000, abs=6e-7), k
