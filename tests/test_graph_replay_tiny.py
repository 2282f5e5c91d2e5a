"""Each dependency kind on hand-made traces: the replay reproduces them and what-ifs move what they should."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from tracegen import TraceBuilder, nccl_args

from lumos_core import jit
from lumos_core.errors import ConfigError, GraphError
from lumos_core.graph.build import build_graph
from lumos_core.replay.run import parse_scale, replay
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Kind


def flat(pairs) -> list[float]:
    return [float(v) for pair in pairs for v in pair]


def replayed(job, scale=None):
    return replay(job, scale=scale or {})


def event_times(result, rank: int, name: str) -> list[tuple[float, float]]:
    """(start, end) in µs of every replayed event named ``name`` (job time base)."""
    t = next(p for p in result.timeline if p.rank == rank)
    ids = np.flatnonzero(t.name == t.strings.index(name))
    return [(t.start[i] / 1000, (t.start[i] + t.dur[i]) / 1000) for i in ids]


def measured_times(job, rank: int, name: str) -> list[tuple[float, float]]:
    t = job.rank(rank)
    ids = np.flatnonzero(t.name == t.strings.index(name))
    return [(t.start[i] / 1000, (t.start[i] + t.dur[i]) / 1000) for i in ids]


@pytest.fixture()
def one_stream(tmp_path: Path):
    """op A, launch -> kernel K, op B, cudaDeviceSynchronize (blocks until K ends), op C; two steps."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.cpu("opA", 0, 10)
    b.launch("K", 12, 3, kts=20, kdur=50)
    b.cpu("opB", 16, 5)
    b.runtime("cudaDeviceSynchronize", 25, 47)  # ends at 72: K ended at 70, +2 µs to return
    b.cpu("opC", 75, 5)
    b.step(2, 100, 10)
    b.cpu("opD", 100, 10)
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    return job


def test_unmodified_replay_reproduces_the_measurement(one_stream) -> None:
    res = replayed(one_stream)
    counts = res.graph.edge_counts()
    assert counts["launch"] == 1 and counts["sync"] == 1 and counts["cpu_thread"] == 5
    for name in ("opA", "K", "opB", "cudaDeviceSynchronize", "opC", "opD"):
        assert flat(event_times(res, 0, name)) == pytest.approx(flat(measured_times(one_stream, 0, name))), (
            name
        )
    it = res.ranks[0].iterations[0]
    assert it.measured.length == it.replayed.length == 100_000
    assert res.mean_abs_error_pct == 0.0


def test_slower_kernel_delays_the_sync_and_everything_after_it(one_stream) -> None:
    res = replayed(one_stream, {"^K$": 2.0})
    (k,) = event_times(res, 0, "K")
    assert k == pytest.approx((20, 120))
    (sync,) = event_times(res, 0, "cudaDeviceSynchronize")
    assert sync[1] == pytest.approx(122)  # ends 2 µs after the kernel, as measured
    (c,) = event_times(res, 0, "opC")
    assert c[0] == pytest.approx(125)
    it = res.ranks[0].iterations[0]
    assert it.replayed.length == pytest.approx(150_000)  # step 2 starts 50 µs later
    assert it.error_pct == pytest.approx(50.0)


def test_faster_kernel_shortens_the_blocking_call(one_stream) -> None:
    res = replayed(one_stream, {"^K$": 0.5})
    (sync,) = event_times(res, 0, "cudaDeviceSynchronize")
    assert sync[1] == pytest.approx(47)  # kernel ends at 45, +2 µs
    (c,) = event_times(res, 0, "opC")
    assert c[0] == pytest.approx(50)


def test_slower_cpu_before_the_launch_delays_the_kernel(one_stream) -> None:
    res = replayed(one_stream, {"^opA$": 3.0})  # 10 -> 30 µs: everything after moves by 20
    (k,) = event_times(res, 0, "K")
    assert k == pytest.approx((40, 90))
    (launch,) = event_times(res, 0, "cudaLaunchKernel")
    assert launch[0] == pytest.approx(32)


def test_queued_kernels_follow_their_stream(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(1, 0, 200)
    b.launch("K1", 0, 3, kts=5, kdur=100)
    b.launch("K2", 4, 3, kts=106, kdur=20)  # launched early, queued behind K1 (1 µs gap)
    b.runtime("cudaDeviceSynchronize", 10, 117)
    b.step(2, 200, 10)
    b.cpu("x", 200, 10)
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    res = replayed(job, {"^K1$": 1.5})
    assert flat(event_times(res, 0, "K2")) == pytest.approx([156, 176])
    assert res.graph.edge_counts()["stream"] == 1


def _two_streams(tmp_path: Path, exact: bool) -> object:
    """K1 on stream 7; record on 7, wait on 20; K2 on stream 20 waits for K1 although launched early."""
    b = TraceBuilder()
    b.step(1, 0, 300)
    b.launch("K1", 0, 3, kts=10, kdur=100)
    rec = b.runtime("cudaEventRecord", 4, 1)
    wait = b.runtime("cudaStreamWaitEvent", 6, 1)
    if exact:
        b.sync_event(
            "Stream Wait Event",
            7,
            stream=20,
            corr=wait,
            wait_on_stream=7,
            wait_on_cuda_event_record_corr_id=rec,
        )
    b.launch("K2", 8, 3, kts=111, kdur=30, stream=20)
    b.runtime("cudaDeviceSynchronize", 12, 130)
    b.step(2, 300, 10)
    b.cpu("x", 300, 10)
    return load_job(b.write(tmp_path / "rank0.json"), use_cache=False)


@pytest.mark.parametrize("exact", [True, False], ids=["cuda_sync", "inferred"])
def test_cross_stream_event_wait(tmp_path: Path, exact: bool) -> None:
    job = _two_streams(tmp_path, exact)
    res = replayed(job)
    assert res.graph.edge_counts()["event_wait"] == 1
    assert flat(event_times(res, 0, "K2")) == pytest.approx(flat(measured_times(job, 0, "K2")))
    slow = replayed(job, {"^K1$": 2.0})
    assert flat(event_times(slow, 0, "K2")) == pytest.approx([211, 241])
    assert ("notes" in slow.as_dict()) and (any("inferred" in n for n in slow.graph.notes) != exact)


def _collective_job(tmp_path: Path, seq: bool) -> object:
    """Rank 1 computes longer, so rank 0 waits inside the all-reduce; the transfer takes 100 µs."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, compute in ((0, 100), (1, 300)):
        b = TraceBuilder(rank=rank, world=2)
        b.step(1, 0, 500)
        b.launch(f"compute_r{rank}", 0, 3, kts=10, kdur=compute)
        b.runtime("cudaEventRecord", 3.2, 0.3)  # ProcessGroupNCCL: the NCCL stream waits for compute
        b.runtime("cudaStreamWaitEvent", 3.6, 0.3)
        b.launch(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            4,
            3,
            kts=10 + compute + 1,
            kdur=400 - compute - 1,
            stream=20,
            kargs=nccl_args(seq=0 if seq else None),
        )
        b.runtime("cudaDeviceSynchronize", 8, 404)
        b.step(2, 500, 10)
        b.cpu("x", 500, 10)
        b.write(folder / f"rank{rank}.json")
    return load_job(folder, use_cache=False)


@pytest.mark.parametrize("seq", [True, False], ids=["seq", "order"])
def test_collective_waits_for_the_last_rank(tmp_path: Path, seq: bool) -> None:
    job = _collective_job(tmp_path, seq)
    assert job.collective_match.summary()["complete"] == 1
    res = replayed(job)
    assert res.graph.edge_counts()["collective"] == 2
    for r in (0, 1):
        assert flat(event_times(res, r, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")) == pytest.approx(
            flat(measured_times(job, r, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"))
        )
    # Rank 1 twice as fast: both ranks' all-reduce end 150 µs earlier (rank 1 arrives at 161).
    fast = replayed(job, {"compute_r1": 0.5})
    (c0,) = event_times(fast, 0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    (c1,) = event_times(fast, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert c0 == pytest.approx((111, 260))  # rank 0 arrives at 111 and waits for rank 1
    assert c1 == pytest.approx((161, 260))
    # Speeding up rank 0, which waits anyway, changes nothing.
    same = replayed(job, {"compute_r0": 0.5})
    assert flat(event_times(same, 1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL")) == pytest.approx([311, 410])


def test_missing_rank_leaves_collectives_unmatched_with_a_warning(tmp_path: Path) -> None:
    job = _collective_job(tmp_path, True)
    (Path(job.rank(1).file)).unlink()
    job = load_job(Path(job.path), use_cache=False)
    assert any("missing: 1" in w for w in job.warnings)
    assert any("lack some of their ranks" in w for w in job.warnings)
    res = replayed(job)
    assert res.graph.edge_counts()["collective"] == 0  # measured duration kept
    assert res.mean_abs_error_pct == 0.0


def test_overlapped_communication_is_free_until_it_is_exposed(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(1, 0, 1100)
    b.launch("compute", 0, 3, kts=10, kdur=1000)
    b.launch("ncclDevKernel_AllGather_RING_LL", 4, 3, kts=14, kdur=200, stream=20)
    b.runtime("cudaDeviceSynchronize", 8, 1004)  # ends 2 µs after compute (the longer of the two)
    b.step(2, 1100, 10)
    b.cpu("x", 1100, 10)
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    base = replayed(job).ranks[0].iterations[0]
    assert base.replayed.length == 1_100_000
    bd = base.replayed_breakdown
    assert (bd.exposed_compute_ns, bd.overlapped_ns, bd.exposed_comm_ns) == (800_000, 200_000, 0)
    for factor in (2.0, 4.0):  # 400, 800 µs: still hidden behind compute
        it = replayed(job, {"nccl": factor}).ranks[0].iterations[0]
        assert it.replayed.length == 1_100_000, factor
    it = replayed(job, {"nccl": 6.0}).ranks[0].iterations[0]  # 1200 µs: ends at 1214, 204 µs after compute
    assert it.replayed.length == 1_100_000 + 204_000
    assert it.replayed_breakdown.exposed_comm_ns == 204_000


def test_backward_thread_waits_for_the_forward_thread(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(1, 0, 1000, tid=1)
    b.cpu("forward", 0, 300, tid=1)
    b.cpu("backward_op", 320, 200, tid=2)  # starts 20 µs after forward ends, on the autograd thread
    b.cpu("optimizer", 600, 100, tid=1)  # main thread resumes after backward
    b.step(2, 1000, 10, tid=1)
    b.cpu("x", 1000, 10, tid=1)
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    res = replayed(job, {"^forward$": 2.0})
    assert res.graph.edge_counts()["cpu_cross"] == 2
    assert flat(event_times(res, 0, "backward_op")) == pytest.approx([620, 820])
    assert flat(event_times(res, 0, "optimizer")) == pytest.approx([900, 1000])


def test_replay_is_deterministic(one_stream) -> None:
    a = replayed(one_stream, {"K": 1.7})
    b = replayed(one_stream, {"K": 1.7})
    assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
    assert a.as_dict()["ranks"] == b.as_dict()["ranks"]


def test_overlapping_kernels_on_one_stream_stay_overlapped(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(1, 0, 200)
    b.launch("K1", 0, 3, kts=10, kdur=100)
    b.launch("K2", 4, 3, kts=60, kdur=100)  # programmatic dependent launch: starts before K1 ends
    b.runtime("cudaDeviceSynchronize", 8, 155)
    b.step(2, 200, 10)
    b.cpu("x", 200, 10)
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    t = job.ranks[0]
    assert sorted(t.depth[t.kind == Kind.KERNEL].tolist()) == [0, 1]  # two sub-rows, none dropped
    res = replayed(job)
    assert flat(event_times(res, 0, "K2")) == pytest.approx([60, 160])


def test_a_trace_without_tasks_is_a_clear_error(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(1, 0, 100)
    job = load_job(b.write(tmp_path / "rank0.json"), use_cache=False)
    with pytest.raises(GraphError, match="no CPU or GPU work"):
        build_graph(job)


def test_cycles_are_reported_not_hung() -> None:
    from lumos_core.graph.order import kahn

    src = np.array([0, 1, 2])
    dst = np.array([1, 2, 1])
    with pytest.raises(GraphError, match="cycle"):
        kahn(3, src, dst, np.zeros(3, np.int64))


def test_scale_arguments_are_validated() -> None:
    assert parse_scale(["nccl=2", "gemm.*=0.5"]) == {"nccl": 2.0, "gemm.*": 0.5}
    for bad in ("nccl", "=2", "nccl=x", "nccl=-1", "(=2"):
        with pytest.raises(ConfigError):
            parse_scale([bad])


def test_cli_replay_json(one_stream, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", "replay", "--json", "--scale", "^K$=2", one_stream.path],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert {"definition", "tasks", "edges", "seconds", "mean_abs_error_pct", "ranks"} <= set(d)
    it = d["ranks"][0]["iterations"][0]
    assert {"name", "measured_us", "replayed_us", "error_pct", "breakdown"} <= set(it)
    assert it["measured_us"] == 100 and it["replayed_us"] == pytest.approx(150)
    assert set(it["breakdown"]["replayed"]) == {
        "exposed_compute_us",
        "overlapped_us",
        "exposed_comm_us",
        "other_us",
        "memory_only_us",  # the part of exposed compute only copies and sets ran (issue 27)
    }
    bad = subprocess.run(
        [sys.executable, "-m", "lumos_core", "replay", "--scale", "K", one_stream.path],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert bad.returncode == 2 and "PATTERN=FACTOR" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_replay_text_labels_its_errors_in_sample(one_stream) -> None:
    # Every accuracy figure says whether it is in-sample or hold-out; a scaled replay is not one.
    def text(*extra: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "lumos_core", "replay", "--no-holdout", *extra, one_stream.path],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    figures = ("mean absolute iteration-time error", "GPU task start error")
    plain = [ln for ln in text().splitlines() if any(f in ln for f in figures)]
    assert plain and all(ln.startswith("in-sample") for ln in plain), plain
    scaled = text("--scale", "^K$=2")
    assert "in-sample: mean absolute" not in scaled
    assert "scaled replay vs measured (not an accuracy figure): mean absolute" in scaled


@pytest.mark.skipif(not jit.ENABLED, reason="numba is not installed or LUMOS_JIT=0")
def test_parsed_and_cached_ranks_share_one_compiled_event_wait_pairing(tmp_path: Path) -> None:
    """The cache's columns are read-only arrays, a parsed rank's are not, and numba compiles a kernel
    per argument types: the pairing takes its inputs read-only either way, so the second source
    compiles nothing (a compile costs seconds, on whatever thread meets it first)."""
    from lumos_core.graph import kernels

    folder = tmp_path / "job"
    folder.mkdir()
    _two_streams(folder, exact=False)  # writes rank0.json and parses it (writable columns)
    parsed = load_job(folder, use_cache=True)  # parsed again, and saved to the cache
    cached = load_job(folder, use_cache=True)  # mapped from the cache: read-only columns
    assert not cached.ranks[0].dur.flags.writeable and parsed.ranks[0].dur.flags.writeable
    for job in (parsed, cached, _two_streams(folder, exact=False)):
        assert build_graph(job).edge_counts()["event_wait"] == 1
    assert len(kernels.event_wait_pairs.signatures) == 1
