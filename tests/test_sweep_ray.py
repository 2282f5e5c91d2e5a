"""The Ray engine on a local Ray instance (2 CPUs): the same rows as the process pool, to the bit,
and the CLI's ``--engine ray`` starting and stopping its own instance."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from conftest import REPO, needs_shared, shared

from lumos_core.graph.build import build_graph
from lumos_core.sweep.engines import LocalEngine, RayEngine
from lumos_core.sweep.grid import parse_grid
from lumos_core.sweep.run import run_grid
from lumos_core.synth.demo import demo_job_path
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import infer_baseline

ray = pytest.importorskip("ray")

GRID = "dp=2,4 pp=1,2,3"  # 6 points, PP 3 skipped
SWEEP_NANOGPT = [
    sys.executable,
    "-m",
    "lumos_core",
    "sweep",
    "--grid",
    "dp=8,16 pp=1,2",
    "--jobs",
    "2",
    "--json",
    "-q",
]


@pytest.fixture(scope="module")
def local_ray():  # type: ignore[no-untyped-def]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):  # type: ignore[no-untyped-def]
    job = load_job(demo_job_path(root=tmp_path_factory.mktemp("demo")))
    return job, infer_baseline(job), build_graph(job)


def test_ray_and_the_process_pool_give_identical_rows(demo, local_ray) -> None:
    job, baseline, graph = demo
    grid = parse_grid(GRID)
    engine = RayEngine()
    on_ray = run_grid(job, grid, engine, baseline=baseline, graph=graph)
    engine.close()  # joined an instance it did not start: leaves it running
    assert ray.is_initialized()
    in_pool = run_grid(job, grid, LocalEngine(2), baseline=baseline, graph=graph)
    assert on_ray.engine == "ray" and on_ray.workers == 2 and on_ray.estimated == 4
    assert [r.changes for r in on_ray.rows] == grid.points()
    for a, b in zip(on_ray.rows, in_pool.rows):
        assert a.same_numbers(b), (a, b)
    assert sum(r.ok for r in on_ray.rows) == 4


@needs_shared
def test_cli_ray_engine_on_nanogpt_equals_the_local_engine(tmp_path) -> None:
    """``--engine ray`` without an address starts a local Ray instance for the sweep and stops it."""
    nanogpt = str(shared("h100-nanogpt-8rank"))
    docs = {}
    for engine in ("local", "ray"):
        run = subprocess.run(
            [*SWEEP_NANOGPT, nanogpt, "--engine", engine, "--out", str(tmp_path / f"{engine}.csv")],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=dict(os.environ),
            timeout=240,
        )
        assert run.returncode == 0, run.stderr
        docs[engine] = orjson.loads(run.stdout)
    assert docs["ray"]["engine"] == "ray" and docs["ray"]["rows"] == docs["local"]["rows"]
    assert (tmp_path / "ray.csv").read_text().splitlines()[0] == (
        tmp_path / "local.csv"
    ).read_text().splitlines()[0]
    assert sorted((tmp_path / "ray.csv").read_text().splitlines()) == sorted(
        (tmp_path / "local.csv").read_text().splitlines()
    )
