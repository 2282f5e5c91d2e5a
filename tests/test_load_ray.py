"""``lumos inspect|replay|estimate --engine ray``: rank files parsed on a local Ray instance (2 CPUs),
their columns written into ``--cache-dir`` by the workers and opened here; the same result as
parsing locally."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import REPO

from lumos_core.synth import ModelSpec, SynthConfig, synthesize

pytest.importorskip("ray")

TINY = ModelSpec("tiny", layers=4, hidden=256, ffn=1024, heads=4, seq=128, vocab=1024)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ray-load") / "job"
    synthesize(SynthConfig(model=TINY, tp=2, pp=2, dp=2, microbatches=4, iterations=2, seed=3), out)
    return out


def lumos(*args: str, cache: Path) -> dict:
    env = {**os.environ, "LUMOS_CACHE_DIR": str(cache.parent / "default-cache")}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", *args, "--json", "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return orjson.loads(out.stdout)


def test_replay_parsed_on_ray_equals_local_parse_and_fills_the_cache_dir(job: Path, tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    on_ray = lumos(
        "replay", str(job), "--engine", "ray", "--workers", "2", "--cache-dir", str(cache), cache=cache
    )
    entries = list((cache / "ranks").iterdir())
    assert len(entries) == 8  # one entry per rank file, written by the Ray workers
    local = lumos("replay", str(job), "--no-cache", "--no-holdout", cache=tmp_path / "x" / "c")
    for d in (on_ray, local):
        for k in ("seconds", "simulate_seconds", "tasks_per_second", "holdout", "null_models"):
            d.pop(k, None)
    assert on_ray == local
    # a second run finds every rank in the cache folder: nothing is parsed (Ray is not even needed)
    again = lumos("inspect", str(job), "--cache-dir", str(cache), cache=cache)
    assert len(again["ranks"]) == 8


def test_address_without_ray_engine_is_a_clear_error(job: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", "inspect", str(job), "--address", "auto", "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 2 and "--address is for --engine ray" in out.stderr


def test_workers_sets_the_size_of_the_local_ray_instance(job: Path, tmp_path: Path, monkeypatch) -> None:
    """``--engine ray --workers N`` (RayParser(jobs=N)) parses on a local instance of N CPUs:
    bench/bench_scale.py times the parse with 1 and with 2 workers this way."""
    from lumos_core.sweep.ray_load import RayParser
    from lumos_core.trace.loader import discover_trace_files
    from lumos_core.trace.model import RankTrace

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    files = discover_trace_files(job)
    parser = RayParser(jobs=1, root=tmp_path / "cache")
    try:
        parsed = dict(parser(files, True))
        assert parser.workers == 1
        assert parser.engine.connect().cluster_resources().get("CPU") == 1
    finally:
        parser.close()
    assert sorted(parsed) == sorted(files)
    assert all(isinstance(r, RankTrace) for r in parsed.values())
