"""CUDA graph launches: the kernels one cudaGraphLaunch releases are tied to it and keep the graph's
order across streams, so a job mixing graph launches with ordinary launches replays faithfully.

The job is synthetic (tests/tracegen.py): this machine has no GPU, so no trace recorded with
``torch.cuda.graphs`` exists here. It checks the graph rules, not Lumos's accuracy on real runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracegen import TraceBuilder

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import EdgeKind
from lumos_core.replay.evaluate import evaluate_holdout
from lumos_core.replay.run import replay
from lumos_core.trace.graph_launches import graph_launch_number
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import GPU_ACTIVITY_KINDS


def mixed_job(path: Path, steps: int = 5, seed: int = 0) -> Path:
    """Per step: six ordinary launches (launch-bound), one graph launch releasing 4 kernels on
    stream 7, a branch of 2 on stream 8 that waits for them and 2 more on stream 7 that wait for the
    branch (graph edges the trace does not record), then a stream synchronize."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder(rank=0)
    t = 0.0
    for n in range(1, steps + 1):
        start = t
        b.cpu("aten::forward", t, 1.0)
        t += 2
        gpu_t = t + 5
        for i in range(6):
            kd = 8 + rng.normal(0, 0.3)
            b.launch(f"elementwise_{i}", t, 4, max(gpu_t, t + 6), kd)
            gpu_t = max(gpu_t, t + 6) + kd + 1
            t += 6 + rng.normal(0, 0.2)
        g0 = max(gpu_t, t + 8)
        kernels = []
        for i in range(4):
            kd = 20 + rng.normal(0, 0.5)
            kernels.append((f"graph_gemm_{i}", g0, kd, 7))
            g0 += kd + 1.5
        b0 = g0 + 2
        for i in range(2):
            kd = 30 + rng.normal(0, 0.5)
            kernels.append((f"graph_branch_{i}", b0, kd, 8))
            b0 += kd + 1.5
        g0 = b0 + 2
        for i in range(2):
            kd = 15 + rng.normal(0, 0.5)
            kernels.append((f"graph_tail_{i}", g0, kd, 7))
            g0 += kd + 1.5
        b.graph_launch(t, 5, kernels)
        t += 8
        corr = b.runtime("cudaStreamSynchronize", t, g0 - t + 3)
        b.sync_event("Stream Sync", g0 + 1, 7, corr)
        t = g0 + 13 + rng.normal(0, 0.3)
        b.step(n, start, t - start)
    return b.write(path)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return load_job(mixed_job(tmp_path_factory.mktemp("cg") / "rank0.json"), workers=1, use_cache=False)


def test_graph_kernels_are_tied_to_their_launch(job) -> None:
    t = job.ranks[0]
    number = graph_launch_number(t)
    released = np.flatnonzero(number > 0)
    assert len(released) == 5 * 8
    assert sorted(set(number[released].tolist())) == [1, 2, 3, 4, 5]
    for n in range(1, 6):
        mine = released[number[released] == n]
        assert len({int(t.launch[e]) for e in mine}) == 1  # one launch call releases them all
        assert t.name_of(int(t.launch[mine[0]])) == "cudaGraphLaunch"
    ordinary = np.flatnonzero((number < 0) & (t.launch >= 0) & np.isin(t.kind, GPU_ACTIVITY_KINDS))
    assert len(ordinary) == 5 * 6


def test_mixed_job_replays_within_2pct_in_sample_and_hold_out(job) -> None:
    res = replay(job)
    assert res.mean_abs_error_pct <= 2.0
    assert res.graph.edge_counts()["graph"] == 5 * 2  # the branch and the join back, per step
    rep = evaluate_holdout(res.graph)
    assert rep.available and len(rep.iterations) == 5
    assert rep.lumos.mean_abs_error_pct <= 2.0


def test_without_the_graph_order_the_branch_runs_too_early(job) -> None:
    """The graph's own order is what makes the replay right: without it the branch starts with
    the launch and the step is replayed far too short."""
    res = replay(job, graph=build_graph(job, without=frozenset({EdgeKind.GRAPH})))
    assert res.mean_abs_error_pct > 2.0


def test_details_panel_says_which_graph_launch(job) -> None:
    from app.panels.details_panel import describe_event
    from app.view_model.loaded_job import prepare_loaded

    loaded = prepare_loaded("synthetic", job, lambda f, m: None)
    t = job.ranks[0]
    number = graph_launch_number(t)
    e = int(np.flatnonzero(number == 3)[0])
    d = describe_event(loaded, 0, e)
    assert d.value("CUDA graph") == "launched by graph launch #3 (8 GPU tasks)"
    plain = int(np.flatnonzero((number < 0) & (t.launch >= 0) & np.isin(t.kind, GPU_ACTIVITY_KINDS))[0])
    assert describe_event(loaded, 0, plain).value("CUDA graph") is None
