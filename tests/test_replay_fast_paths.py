"""The replay's vectorised shortcuts against the straightforward versions they replace: breakdowns of
several windows from one set of interval unions, every lane of a rank mapped at once, and the
critical-path walk's per-rank task lists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shared

from lumos_core.graph.build import build_graph
from lumos_core.graph.model import NodeType
from lumos_core.replay import run, timeline
from lumos_core.replay.breakdown import Window, breakdown, breakdowns
from lumos_core.replay.kernels import CAT_COMM, CAT_COMPUTE, CAT_CPU
from lumos_core.replay.run import PathContext
from lumos_core.replay.simulate import simulate
from lumos_core.trace.loader import load_job

CPU_GPT = Path(__file__).parent / "data" / "cpu-gpt" / "base"


@pytest.mark.parametrize("seed", range(20))
def test_breakdowns_of_several_windows_equal_one_breakdown_per_window(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    starts = rng.integers(0, 1_000, n)
    ends = starts + rng.integers(0, 120, n)  # empty intervals included
    comm = rng.random(n) < 0.4
    windows = []
    for k in range(int(rng.integers(1, 6))):
        lo = int(rng.integers(-50, 1_000))
        windows.append(Window(f"w{k}", lo, lo + int(rng.integers(0, 500))))
    got = breakdowns(starts, ends, comm, windows)
    assert got == [breakdown(starts, ends, comm, w.start, w.end) for w in windows]


def _jobs() -> list[Path]:
    out = [CPU_GPT]
    for folder in ("h100-nanogpt-8rank", "dlrm-v100-8rank"):
        if shared(folder).is_dir():
            out.append(shared(folder))
    return out


@pytest.mark.parametrize("path", _jobs(), ids=lambda p: p.name)
def test_all_lanes_at_once_map_like_the_lane_by_lane_loop(path: Path) -> None:
    job = load_job(path)
    graph = build_graph(job)
    start, end = simulate(graph, graph.dur * 3 // 2)  # slower tasks: the other events must move
    moved = 0
    for t in job.ranks:
        node_of = graph.rank_nodes[t.rank]
        is_task = node_of >= 0
        ev = np.flatnonzero(is_task)
        nodes = node_of[ev]
        m_start = np.asarray(t.start)
        m_end = m_start + np.asarray(t.dur)
        results = []
        for vectorised in (True, False):
            new_start, new_end = m_start.copy(), m_end.copy()
            new_start[ev] = start[np.where(graph.arrive_of[nodes] >= 0, graph.arrive_of[nodes], nodes)]
            new_end[ev] = end[nodes]
            if vectorised:
                assert timeline._move_with_tasks(t, is_task, m_start, m_end, new_start, new_end)
            else:
                timeline._move_with_tasks_by_lane(t, is_task, m_start, m_end, new_start, new_end)
            results.append((new_start, new_end))
        assert np.array_equal(results[0][0], results[1][0])
        assert np.array_equal(results[0][1], results[1][1])
        moved += int(np.count_nonzero(results[0][0] != m_start))
    assert moved > 0  # the replay moved some non-task events: the comparison is not vacuous


def test_times_too_far_out_for_lane_keys_are_left_to_the_loop() -> None:
    job = load_job(CPU_GPT)
    graph = build_graph(job)
    t = job.ranks[0]
    is_task = graph.rank_nodes[t.rank] >= 0
    far = np.asarray(t.start) + 2**62  # a lane's key range would pass int64
    assert not timeline._move_with_tasks(t, is_task, far, far + np.asarray(t.dur), far.copy(), far.copy())


@pytest.mark.parametrize("path", _jobs(), ids=lambda p: p.name)
@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_path_context_lists_each_ranks_tasks_in_node_order(path: Path, chunk: int, monkeypatch) -> None:
    graph = build_graph(load_job(path))
    monkeypatch.setattr(run, "_CHUNK", chunk)
    ctx = PathContext(graph)
    for r in np.unique(graph.rank).tolist():
        want = np.flatnonzero((graph.rank == r) & (graph.node_type <= NodeType.GPU))
        assert np.array_equal(ctx.nodes_of(r), want)
    assert len(ctx.nodes_of(10**6)) == 0


@pytest.mark.parametrize("path", _jobs(), ids=lambda p: p.name)
def test_node_categories_do_not_depend_on_the_chunk_size(path: Path, monkeypatch) -> None:
    graph = build_graph(load_job(path))
    whole = run.node_categories(graph)
    monkeypatch.setattr(run, "_CHUNK", 7)
    assert np.array_equal(run.node_categories(graph), whole)
    assert set(np.unique(whole).tolist()) <= {CAT_CPU, CAT_COMM, CAT_COMPUTE}
    assert np.all(whole[graph.node_type == NodeType.CPU] == CAT_CPU)
