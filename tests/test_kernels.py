"""The compiled graph and replay kernels against their pure-Python references.

Random DAGs (hypothesis) exercise the kernels directly; real and synthetic traces are built and
replayed twice, on the kernels and on their independent Python references (tests/kernel_references.py),
and every array of the graph, every replayed time and every critical path must be identical.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO, needs_shared, shared
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_references import (
    calibrate_start_lags_reference,
    critical_path_reference,
    csr_reference,
    kahn_reference,
    place_in_gap_numpy,
    simulate_reference,
    topological_order_reference,
    use_references,
)

from lumos_core import jit
from lumos_core.errors import GraphError
from lumos_core.graph import kernels as graph_kernels
from lumos_core.graph.calibrate import calibrate_start_lags
from lumos_core.graph.model import NO_ANCHOR, NodeType
from lumos_core.graph.order import (
    csr,
    dependency_order,
    kahn,
    narrow_ptr,
    order_key,
    stable_order_by_node,
    topological_order,
)
from lumos_core.replay import kernels as replay_kernels
from lumos_core.replay.breakdown import iteration_windows
from lumos_core.replay.run import critical_path, replay
from lumos_core.replay.simulate import simulate
from lumos_core.replay.warm_up import warm_up
from lumos_core.synth import ModelSpec, SynthConfig, synthesize
from lumos_core.trace.loader import load_job

GRAPH_ARRAYS = (
    "rank", "event", "node_type", "proc", "dur", "anchor", "measured_start", "measured_end",
    "sp_ptr", "sp_src", "sp_lag", "sp_from_end", "sp_kind", "ep_ptr", "ep_src", "ep_lag",
    "ep_from_end", "ep_kind", "order", "arrive_of",
)  # fmt: skip


@st.composite
def dags(draw: st.DrawFn, cycles: bool = False) -> SimpleNamespace:
    """A random graph in the replay's CSR layout: start and end dependencies, lags, anchors, and
    keys with many ties (the topological order breaks them by node id)."""
    n = draw(st.integers(2 if cycles else 1, 40))
    m = draw(st.integers(0, 3 * n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    perm = rng.permutation(n)  # edges go forward in this order: a DAG
    a = rng.integers(0, n, m)
    b = rng.integers(0, n, m)
    keep = a != b
    a, b = a[keep], b[keep]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    src, dst = perm[lo], perm[hi]
    if cycles:  # two nodes waiting for each other (and whatever depends on them)
        src, dst = np.r_[src, perm[0], perm[-1]], np.r_[dst, perm[-1], perm[0]]
    end_dep = rng.random(len(src)) < 0.2
    key = rng.integers(0, 5, n) * 1000

    def csr(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        s, d = src[mask], dst[mask]
        order = np.argsort(d, kind="stable")
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(d, minlength=n), out=ptr[1:])
        lag = rng.integers(-50, 500, len(s))
        return ptr, s[order].astype(np.int32), lag[order].astype(np.int64), rng.random(len(s)) < 0.7

    sp_ptr, sp_src, sp_lag, sp_fe = csr(~end_dep)
    ep_ptr, ep_src, ep_lag, ep_fe = csr(end_dep)
    anchor = np.where(rng.random(n) < 0.3, rng.integers(0, 3000, n), -(2**60)).astype(np.int64)
    return SimpleNamespace(
        n_nodes=n, src=src, dst=dst, key=key, dur=rng.integers(0, 1000, n).astype(np.int64),
        anchor=anchor, sp_ptr=sp_ptr, sp_src=sp_src, sp_lag=sp_lag, sp_from_end=sp_fe,
        sp_kind=rng.integers(0, 9, len(sp_src)).astype(np.int8),
        ep_ptr=ep_ptr, ep_src=ep_src, ep_lag=ep_lag, ep_from_end=ep_fe,
        node_type=rng.integers(0, 4, n).astype(np.int8), category=rng.integers(0, 3, n).astype(np.int8),
        perm=perm,
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(dags())
def test_kahn_matches_heapq_reference_on_random_dags(g: SimpleNamespace) -> None:
    ref = kahn_reference(g.n_nodes, g.src, g.dst, g.key)
    assert np.array_equal(kahn(g.n_nodes, g.src, g.dst, g.key), ref)
    ptr = np.zeros(g.n_nodes + 1, np.int64)
    order = np.argsort(g.src, kind="stable")
    np.cumsum(np.bincount(g.src, minlength=g.n_nodes), out=ptr[1:])
    indeg = np.bincount(g.dst, minlength=g.n_nodes).astype(np.int32)
    by_key = np.argsort(g.key, kind="stable").astype(np.int32)
    plain, _ = graph_kernels.kahn_ranked.py_func(by_key, ptr, g.dst[order].astype(np.int32), indeg)
    assert np.array_equal(plain, ref)


def _measured(g: SimpleNamespace, seed: int, forward: bool) -> tuple[np.ndarray, np.ndarray]:
    """Measured (start, end) per node, coarse so that many tie: ``forward`` follows the DAG's own
    order (the measured order is then nearly topological, as in a real trace), else random."""
    rng = np.random.default_rng(seed)
    n = g.n_nodes
    if forward:
        place = np.empty(n, np.int64)
        place[g.perm] = np.arange(n)
        ms = (place // rng.integers(1, 4)) * 1000 - rng.integers(0, 2, n) * 1000 * (rng.random(n) < 0.1)
    else:
        ms = rng.integers(0, 6, n) * 1000
    return ms.astype(np.int64), (ms + rng.integers(0, 3, n) * 1000).astype(np.int64)


@settings(max_examples=300, deadline=None)
@given(dags(), st.integers(0, 2**32 - 1), st.booleans())
def test_measured_topological_order_compiled_equals_reference(
    g: SimpleNamespace, seed: int, forward: bool
) -> None:
    """Measured order taken as is (joins last among ties), or Kahn's algorithm by (time, id) when it
    is not topological: the compiled single pass must give the reference's order in every case."""
    ms, me = _measured(g, seed, forward)
    args = (ms, me, g.node_type, g.sp_ptr, g.sp_src, g.ep_ptr, g.ep_src)
    ref = topological_order_reference(*args)
    got = topological_order(*args)
    assert got.dtype == ref.dtype == np.int32 and np.array_equal(got, ref)
    key = order_key(ms, me, g.ep_ptr)
    by_key = np.argsort(key, kind="stable").astype(np.int32)
    is_join = g.node_type == NodeType.JOIN
    plain, deg = graph_kernels.measured_order.py_func(
        by_key, key[by_key], is_join, g.sp_ptr, g.sp_src, g.ep_ptr, g.ep_src
    )
    assert np.array_equal(plain, ref) and not deg.any()


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 300),
    st.sampled_from([(0, 5), (0, 2**40), (-(2**62), 2**62), (-(2**63), 2**63 - 1), (7, 8)]),
)
def test_radix_sort_by_key_equals_stable_argsort(seed: int, n: int, bounds: tuple[int, int]) -> None:
    """Ties (kept in id order), negative keys, ranges needing every digit up to the full int64 one."""
    rng = np.random.default_rng(seed)
    lo, hi = bounds
    key = rng.integers(lo, hi, n, dtype=np.int64, endpoint=True)
    if n and rng.random() < 0.3:
        key[rng.integers(0, n, n // 2)] = key[0]  # many equal keys
    want = np.argsort(key, kind="stable")
    for sort in (graph_kernels.sort_by_key, graph_kernels.sort_by_key.py_func):
        order, sorted_key = sort(key.copy())
        assert order.dtype == np.int32 and np.array_equal(order, want)
        assert sorted_key.dtype == np.int64 and np.array_equal(sorted_key, key[want])


def test_measured_order_takes_each_of_its_three_ways() -> None:
    """Joins last among ties when that holds; (time, id) when only that holds; Kahn otherwise."""
    ptr = lambda *counts: np.r_[0, np.cumsum(counts)].astype(np.int64)  # noqa: E731
    none = np.zeros(0, np.int32)
    join, gpu = NodeType.JOIN, NodeType.GPU
    typ = np.asarray([gpu, join, gpu], np.int8)
    ms = np.asarray([0, 0, 0], np.int64)
    # node 2 depends on join 1: (time, joins last, id) = 0, 2, 1 breaks it; (time, id) holds
    deps = np.asarray([1], np.int32)
    assert topological_order(ms, ms, typ, ptr(0, 0, 1), deps, ptr(0, 0, 0), none).tolist() == [0, 1, 2]
    # no dependency: joins last
    assert topological_order(ms, ms, typ, ptr(0, 0, 0), none, ptr(0, 0, 0), none).tolist() == [0, 2, 1]
    # node 0 depends on node 2: neither sorted order holds; Kahn takes 1 (ready, lowest), 2, 0
    got = topological_order(ms, ms, typ, ptr(1, 0, 1), np.asarray([2, 1], np.int32), ptr(0, 0, 0), none)
    assert got.tolist() == [1, 2, 0]
    for order in (topological_order, topological_order_reference):
        with pytest.raises(GraphError):
            order(ms, ms, typ, ptr(1, 0, 1), np.asarray([2, 0], np.int32), ptr(0, 0, 0), none)


@settings(max_examples=60, deadline=None)
@given(dags(cycles=True), st.integers(0, 2**32 - 1), st.booleans())
def test_measured_topological_order_reports_the_reference_cycle(
    g: SimpleNamespace, seed: int, forward: bool
) -> None:
    ms, me = _measured(g, seed, forward)
    args = (ms, me, g.node_type, g.sp_ptr, g.sp_src, g.ep_ptr, g.ep_src)
    with pytest.raises(GraphError) as ref:
        topological_order_reference(*args)
    with pytest.raises(GraphError) as got:
        topological_order(*args)
    assert str(got.value) == str(ref.value)
    assert got.value.stuck == ref.value.stuck  # type: ignore[attr-defined]


@settings(max_examples=100, deadline=None)
@given(dags(cycles=False))
def test_dependency_order_is_kahn_by_node_id(g: SimpleNamespace) -> None:
    n = g.n_nodes
    ids = np.arange(n)
    dst = np.r_[np.repeat(ids, np.diff(g.sp_ptr)), np.repeat(ids, np.diff(g.ep_ptr))]
    ref = kahn_reference(n, np.r_[g.sp_src, g.ep_src], dst, ids.astype(np.int64))
    assert np.array_equal(dependency_order(g.sp_ptr, g.sp_src, g.ep_ptr, g.ep_src), ref)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 50), st.integers(0, 300), st.integers(0, 2**32 - 1), st.sampled_from([np.int32, np.int64])
)
def test_csr_layout_compiled_equals_numpy(n: int, m: int, seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    dst = rng.integers(0, n, m).astype(dtype)
    cols = (
        rng.integers(0, n, m).astype(dtype),
        rng.integers(-(2**40), 2**40, m).astype(np.int64),
        rng.random(m) < 0.5,
        rng.integers(0, 10, m).astype(np.int8),
    )
    ref_ptr, ref = csr_reference(n, dst, *cols)
    for ptr, got in (csr(n, dst, *cols), graph_kernels.csr_edges.py_func(n, dst, *cols)):
        assert ptr.dtype == ref_ptr.dtype and np.array_equal(ptr, ref_ptr)
        for a, b in zip(got, ref):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(dags(cycles=True))
def test_kahn_reports_the_same_cycle_as_the_reference(g: SimpleNamespace) -> None:
    with pytest.raises(GraphError) as ref:
        kahn_reference(g.n_nodes, g.src, g.dst, g.key)
    with pytest.raises(GraphError) as got:
        kahn(g.n_nodes, g.src, g.dst, g.key)
    assert str(got.value) == str(ref.value)
    assert got.value.stuck == ref.value.stuck  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(dags())
def test_simulation_kernel_matches_reference_on_random_dags(g: SimpleNamespace) -> None:
    g.order = kahn_reference(g.n_nodes, g.src, g.dst, g.key)
    ref_s, ref_e = simulate_reference(g)  # type: ignore[arg-type]
    s, e = simulate(g)  # type: ignore[arg-type]
    assert np.array_equal(s, ref_s) and np.array_equal(e, ref_e)
    dur = g.dur * 3
    lag = g.sp_lag // 2
    ref_s, ref_e = simulate_reference(g, dur, lag)  # type: ignore[arg-type]
    s, e = simulate(g, dur, lag)  # type: ignore[arg-type]
    assert np.array_equal(s, ref_s) and np.array_equal(e, ref_e)
    g.sp_ptr, g.ep_ptr = narrow_ptr(g.sp_ptr), narrow_ptr(g.ep_ptr)  # a built graph's int32 pointers
    assert g.sp_ptr.dtype == np.int32
    s, e = simulate(g, dur, lag)  # type: ignore[arg-type]
    assert np.array_equal(s, ref_s) and np.array_equal(e, ref_e)


@settings(max_examples=150, deadline=None)
@given(dags(), st.integers(0, 2000))
def test_critical_walk_compiled_equals_its_python_form(g: SimpleNamespace, window_start: int) -> None:
    order = kahn_reference(g.n_nodes, g.src, g.dst, g.key)
    start, end = replay_kernels.simulate_pass.py_func(
        order, g.anchor, g.dur, g.sp_ptr, g.sp_src, g.sp_from_end, g.sp_lag,
        g.ep_ptr, g.ep_src, g.ep_from_end, g.ep_lag,
    )  # fmt: skip
    v = int(order[-1])
    args = (
        v, window_start, start, end, g.anchor, g.dur, g.node_type, g.category, g.sp_ptr, g.sp_src,
        g.sp_from_end, g.sp_lag, g.sp_kind, g.ep_ptr, g.ep_src, g.ep_from_end, g.ep_lag, 13, 10_000,
    )  # fmt: skip
    ref = replay_kernels.critical_walk.py_func(*args)
    narrow = list(args)
    narrow[8], narrow[13] = narrow_ptr(g.sp_ptr), narrow_ptr(g.ep_ptr)  # a built graph's int32 pointers
    for got in (replay_kernels.critical_walk(*args), replay_kernels.critical_walk(*narrow)):
        for a, b in zip(got, ref):
            assert np.array_equal(a, b)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.integers(1, 12), st.integers(0, 2**32 - 1), st.sampled_from([10, 10**6, 2**40]))
def test_gap_placement_compiled_equals_numpy(n: int, n_tasks: int, seed: int, span: int) -> None:
    """Placing a timeline's other events between its replayed tasks: the kernel, its Python form and
    the numpy expression it replaced give the same times, for points before, between (in gaps that
    grew, shrank, vanished or overlap) and after the tasks."""
    rng = np.random.default_rng(seed)
    ms = np.sort(rng.integers(0, span, n_tasks))
    me = ms + rng.integers(0, span // 4 + 1, n_tasks)
    order_e = np.argsort(me, kind="stable")
    me_sorted = me[order_e]
    ns = ms + rng.integers(-span // 8, span // 2 + 1, n_tasks)  # moved either way
    ne_sorted = (ns + rng.integers(0, span // 4 + 1, n_tasks))[order_e]
    x = rng.integers(-span // 4, span + span // 4 + 1, n)
    nxt = np.searchsorted(ms, x, side="left")
    prv = np.searchsorted(me_sorted, x, side="right") - 1
    args = (
        x,
        np.minimum(nxt, n_tasks - 1),
        np.maximum(prv, 0),
        nxt < n_tasks,
        prv >= 0,
        ms,
        ns,
        me_sorted,
        ne_sorted,
    )
    ref = place_in_gap_numpy(*args)
    for got in (replay_kernels.place_in_gap(*args), replay_kernels.place_in_gap.py_func(*args)):
        assert got.dtype == np.int64 and np.array_equal(got, ref)


def test_gap_placement_rounds_half_to_even_like_numpy() -> None:
    """A point a third or a half of the way through a gap stretched to an odd length lands where
    numpy's float64 fraction and round-half-to-even put it."""
    ms, ns = np.array([10, 100]), np.array([10, 103])  # the gap 20..100 becomes 20..103
    me_sorted, ne_sorted = np.array([20, 110]), np.array([20, 113])
    x = np.array([21, 40, 60, 61, 99])
    args = (x, np.ones(5, np.int64), np.zeros(5, np.int64), np.ones(5, bool), np.ones(5, bool))
    ref = place_in_gap_numpy(*args, ms, ns, me_sorted, ne_sorted)
    assert np.array_equal(replay_kernels.place_in_gap(*args, ms, ns, me_sorted, ne_sorted), ref)
    assert ref.tolist() == [
        21,
        41,
        62,
        63,
        102,
    ]  # 20 + rint(frac * 83): 1.0375, 20.75, 41.5, 42.5375, 81.9625


def test_csr_pointers_narrow_to_int32_only_while_the_edges_fit() -> None:
    small = np.asarray([0, 3, 2**31 - 2], np.int64)
    assert narrow_ptr(small).dtype == np.int32 and np.array_equal(narrow_ptr(small), small)
    big = np.asarray([0, 3, 2**31 - 1], np.int64)  # past int32: kept as it is
    assert narrow_ptr(big).dtype == np.int64 and np.array_equal(narrow_ptr(big), big)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(0, 120), st.integers(0, 2**32 - 1), st.booleans())
def test_start_lag_calibration_compiled_equals_numpy_reference(
    n: int, m: int, seed: int, absorb: bool
) -> None:
    """Edges in any order onto tasks measured at coarse (tied) times: tightened, loosened, anchored
    and binding-edge ties must come out the same, lag for lag."""
    rng = np.random.default_rng(seed)
    ms = rng.integers(0, 6, n).astype(np.int64) * 1000
    node = {
        "ms": ms,
        "me": ms + rng.integers(0, 3, n) * 500,
        "dur": np.zeros(n, np.int64),
        "type": rng.integers(0, 3, n).astype(np.int8),
    }
    src = rng.integers(0, n, m).astype(np.int32)
    dst = rng.integers(0, n, m).astype(np.int32)
    lag = rng.integers(-2, 3, m).astype(np.int64) * 700
    from_end = rng.random(m) < 0.5
    anchor = np.where(rng.random(n) < 0.3, ms, NO_ANCHOR).astype(np.int64)
    args = (node, src, dst, lag, from_end, anchor, absorb)
    got_lag, got_unexplained = calibrate_start_lags(*args)
    ref_lag, ref_unexplained = calibrate_start_lags_reference(*args)
    assert got_unexplained == ref_unexplained
    assert got_lag.dtype == ref_lag.dtype and np.array_equal(got_lag, ref_lag)
    py = graph_kernels.calibrate_start.py_func(
        src, dst, lag, from_end, ms, node["me"], anchor, NO_ANCHOR, absorb
    )
    assert np.array_equal(py[0], ref_lag)
    assert int(py[1][node["type"] != NodeType.CPU].sum()) == ref_unexplained


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 50), st.integers(0, 300), st.integers(0, 2**32 - 1), st.sampled_from([np.int32, np.int64])
)
def test_counting_sort_of_edges_equals_stable_argsort(n: int, m: int, seed: int, dtype: type) -> None:
    ids = np.random.default_rng(seed).integers(0, n, m).astype(dtype)
    want = np.argsort(ids, kind="stable")
    assert np.array_equal(graph_kernels.stable_bucket_order(ids, n), want)
    assert np.array_equal(graph_kernels.stable_bucket_order.py_func(ids, n), want)
    assert np.array_equal(stable_order_by_node(n, ids), want)


# ------------------------------------------------------------- whole graphs, compiled vs reference


def _both_ways(job, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    fast = replay(job)
    with monkeypatch.context() as m:
        use_references(m)
        ref = replay(job)
    return fast, ref


def assert_identical(fast, ref) -> None:  # type: ignore[no-untyped-def]
    for name in GRAPH_ARRAYS:
        a, b = getattr(fast.graph, name), getattr(ref.graph, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert fast.graph.notes == ref.graph.notes
    assert fast.graph.unexplained_ns == ref.graph.unexplained_ns
    assert np.array_equal(fast.start, ref.start) and np.array_equal(fast.end, ref.end)
    for a, b in zip(fast.ranks, ref.ranks):
        assert list(a.critical_paths) == list(b.critical_paths)
        for name, p in a.critical_paths.items():
            q = b.critical_paths[name]
            assert np.array_equal(p.nodes, q.nodes) and p.length_ns == q.length_ns
            assert list(p.by_category_ns.items()) == list(q.by_category_ns.items())
    assert fast.as_dict(include_busy=True) | {"seconds": 0, "simulate_seconds": 0, "tasks_per_second": 0} == (
        ref.as_dict(include_busy=True) | {"seconds": 0, "simulate_seconds": 0, "tasks_per_second": 0}
    )


def test_synthetic_job_is_identical_compiled_and_reference(tmp_path: Path, monkeypatch) -> None:
    tiny = ModelSpec("tiny", layers=4, hidden=256, ffn=1024, heads=4, seq=128, vocab=1024)
    synthesize(
        SynthConfig(model=tiny, tp=2, pp=2, dp=2, microbatches=4, iterations=2, seed=3), tmp_path / "j"
    )
    fast, ref = _both_ways(load_job(tmp_path / "j"), monkeypatch)
    assert fast.graph.edge_counts()["event_wait"] > 0 and fast.graph.edge_counts()["collective"] > 0
    assert_identical(fast, ref)


def test_recorded_cpu_trace_is_identical_compiled_and_reference(monkeypatch) -> None:
    fast, ref = _both_ways(load_job(REPO / "tests" / "data" / "cpu-gpt" / "base"), monkeypatch)
    assert_identical(fast, ref)


@needs_shared
@pytest.mark.parametrize(
    "path",
    [
        "h100-nanogpt-8rank",
        "a100-ddp-2rank",
        "dlrm-v100-8rank",
        "hta-critical-path/alexnet.json.gz",
        "hta-critical-path/event_sync.json.gz",
        "hta-critical-path/event_sync_multi_stream.json.gz",
        "h100-hf-inference/gaunernst_bert-small-uncased__1016001.json.gz",
        "edge-cases/backward_thread_plain.json",
        "edge-cases/triton_cuLaunchKernel.json.gz",
        "edge-cases/rocm_mi250_minitoy.json.gz",
        "edge-cases/sampled_no_flows_rank-0.json.gz",
    ],
)
def test_shared_trace_is_identical_compiled_and_reference(path: str, monkeypatch) -> None:
    job = load_job(shared(path))
    fast, ref = _both_ways(job, monkeypatch)
    assert_identical(fast, ref)


def test_critical_path_without_context_matches_reference(tmp_path: Path) -> None:
    job = load_job(REPO / "tests" / "data" / "cpu-gpt" / "base")
    r = replay(job, critical_paths=False)
    for t, p in zip(job.ranks, r.timeline):
        for w in iteration_windows(p):
            a = critical_path(r.graph, r.start, r.end, t.rank, w)
            b = critical_path_reference(r.graph, r.start, r.end, t.rank, w)
            assert np.array_equal(a.nodes, b.nodes) and a.by_category_ns == b.by_category_ns


def test_numba_caches_outside_the_install_folder() -> None:
    if not jit.ENABLED:
        pytest.skip("numba is not installed")
    import os

    cache = Path(os.environ["NUMBA_CACHE_DIR"]).resolve()
    assert REPO not in cache.parents and cache != REPO
    warm_up()
    assert any(cache.rglob("*.nbi")), "warm_up wrote no compiled code to the cache"


def test_kahn_on_a_large_graph_whose_times_run_against_its_dependencies() -> None:
    """Thousands of nodes passed over before they are ready: the compiled heap must grow and still
    give the reference's order."""
    rng = np.random.default_rng(7)
    n, m = 6000, 20000
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    src, dst = np.minimum(a, b)[keep], np.maximum(a, b)[keep]  # edges go up in id...
    key = (n - np.arange(n)) // 3 * 10  # ...and times go down, with ties
    assert np.array_equal(kahn(n, src, dst, key), kahn_reference(n, src, dst, key))


def test_warm_up_compiles_every_graph_kernel_signature_a_build_uses() -> None:
    """The app warms the kernels up on a worker at start-up; a graph build (traced and rebuilt) and
    its replay (int32 CSR pointers) must then compile nothing more (in a fresh process, so no other
    test's calls count)."""
    if not jit.ENABLED:
        pytest.skip("numba is not installed")
    import subprocess
    import sys

    code = (
        "from lumos_core.graph import kernels as k\n"
        "from lumos_core.replay.warm_up import warm_up\n"
        "warm_up()\n"
        "from lumos_core.replay import kernels as rk\n"
        "fns = {m.__name__ + '.' + n: getattr(m, n) for m in (k, rk) for n in dir(m)}\n"
        "fns = {n: f for n, f in fns.items() if hasattr(f, 'signatures')}\n"
        "before = {n: len(f.signatures) for n, f in fns.items()}\n"
        "from lumos_core.trace.loader import load_job\n"
        "from lumos_core.graph.build import build_graph\n"
        "from lumos_core.graph.order import dependency_order\n"
        "from lumos_core.replay.run import replay\n"
        f"job = load_job({str(REPO / 'tests' / 'data' / 'cpu-gpt' / 'base')!r})\n"
        "g = build_graph(job)\n"
        "dependency_order(g.sp_ptr, g.sp_src, g.ep_ptr, g.ep_src)\n"
        "replay(job, graph=g)\n"
        "after = {n: len(f.signatures) for n, f in fns.items()}\n"
        "print({n: (before[n], after[n]) for n in fns if before[n] != after[n]})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{}", f"compiled after warm-up: {out.stdout}"
