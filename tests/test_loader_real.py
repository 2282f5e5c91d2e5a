"""The loader on real traces: counts checked against an independent stdlib-json reading of the files."""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, shared, shared_file

from lumos_core.trace.kineto_reader import parse_trace_file
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import CollectiveKind, Kind, LaneRole

pytestmark = needs_shared


def raw_events(path: Path) -> list[dict]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def raw_category_counts(path: Path) -> collections.Counter:
    return collections.Counter(
        e.get("cat") for e in raw_events(path) if isinstance(e, dict) and e.get("ph") == "X"
    )


@pytest.fixture(scope="module")
def nanogpt():
    return load_job(shared("h100-nanogpt-8rank"), use_cache=False)


def test_nanogpt_has_eight_ranks_from_distributed_info(nanogpt) -> None:
    assert [t.rank for t in nanogpt.ranks] == list(range(8))
    assert {t.rank_source for t in nanogpt.ranks} == {"distributedInfo"}
    assert "distributedInfo" in nanogpt.rank_rule
    assert nanogpt.world_size == 8
    assert all(t.device_name == "NVIDIA H100 80GB HBM3" for t in nanogpt.ranks)


def test_nanogpt_rank0_counts_match_the_file(nanogpt) -> None:
    r0 = nanogpt.rank(0)
    assert "rank0" in Path(r0.file).name
    raw = raw_category_counts(Path(r0.file))
    assert r0.count(Kind.KERNEL) == raw["kernel"] == 2917
    assert r0.count(Kind.MEMCPY) == raw["gpu_memcpy"] == 542
    assert r0.count(Kind.MEMSET) == raw["gpu_memset"] == 353
    assert r0.count(Kind.CPU_OP) == raw["cpu_op"] == 8896
    assert r0.count(Kind.RUNTIME) == raw["cuda_runtime"] + raw["cuda_driver"]
    assert r0.count(Kind.GPU_ANNOTATION) == raw["gpu_user_annotation"]
    assert len(r0) == sum(v for k, v in raw.items() if k != "Trace")
    # 76 NCCL kernels (ReduceScatter + AllGather) on the communication stream.
    nccl = sum(
        1 for e in raw_events(Path(r0.file)) if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
    )
    assert len(r0.collectives) == nccl == 76
    kinds = collections.Counter(CollectiveKind(k) for k in r0.collectives.kind)
    assert set(kinds) == {CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_GATHER}


def test_nanogpt_kernel_counts_per_rank(nanogpt) -> None:
    # Ranks do different optimizer work, so their kernel counts differ (README: 2917-3349).
    counts = [t.count(Kind.KERNEL) for t in nanogpt.ranks]
    assert counts == [2917, 3023, 2979, 3236, 3349, 3295, 3305, 3305]


def test_nanogpt_iterations_are_profiler_steps_10_to_13(nanogpt) -> None:
    for t in nanogpt.ranks:
        assert [it.name for it in t.iterations] == [f"ProfilerStep#{n}" for n in (10, 11, 12, 13)]
        starts = [it.cpu_start for it in t.iterations]
        assert starts == sorted(starts)
        for it in t.iterations:
            assert it.gpu_start >= it.cpu_start  # GPU work of a step follows its CPU launch
    r0 = nanogpt.rank(0)
    raw = [
        e
        for e in raw_events(Path(r0.file))
        if e.get("cat") == "user_annotation" and e["name"] == "ProfilerStep#11"
    ]
    assert len(raw) == 1
    it = r0.iterations[1]
    assert it.cpu_end - it.cpu_start == round(raw[0]["dur"] * 1000)


def test_nanogpt_streams_get_roles(nanogpt) -> None:
    for t in nanogpt.ranks:
        roles = sorted(ln.role for ln in t.lanes if ln.is_gpu)
        assert roles == [LaneRole.COMPUTE, LaneRole.COMMUNICATION]
        comm = next(ln for ln in t.lanes if ln.role == LaneRole.COMMUNICATION)
        sl = t.lane_slice(comm.index)
        assert set(t.kind[sl][np.isin(t.kind[sl], [Kind.KERNEL])].tolist()) == {Kind.KERNEL}
        assert len(t.collectives) == int((t.kind[sl] == Kind.KERNEL).sum())
    roles0 = {ln.role for ln in nanogpt.rank(0).lanes if not ln.is_gpu}
    assert LaneRole.CPU_MAIN in roles0 and LaneRole.CPU_AUTOGRAD in roles0


def test_every_kernel_whose_launch_is_in_the_trace_is_linked(nanogpt) -> None:
    for t in nanogpt.ranks:
        act = np.isin(t.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
        runtime_corr = set(t.correlation[t.kind == Kind.RUNTIME].tolist())
        has_launch_in_trace = act & np.isin(t.correlation, list(runtime_corr))
        assert has_launch_in_trace.sum() > 2500
        linked = t.launch >= 0
        assert np.array_equal(linked & act, has_launch_in_trace)
        idx = np.flatnonzero(linked & act)
        assert np.array_equal(t.correlation[t.launch[idx]], t.correlation[idx])
        assert (t.kind[t.launch[idx]] == Kind.RUNTIME).all()
        # A kernel never starts before the call that launched it ends... minus CUPTI's clock fuzz.
        assert (t.start[idx] >= t.start[t.launch[idx]]).mean() > 0.999


def test_collectives_are_matched_across_ranks(nanogpt) -> None:
    match = nanogpt.collective_match
    assert match.method == "issue order within each process group"
    assert match.n_instances == 84  # ranks 5-7 hold 8 more at the start of their window
    complete = np.flatnonzero(match.complete)
    assert len(complete) == 76
    ends: dict[int, list[int]] = collections.defaultdict(list)
    for t in nanogpt.ranks:
        inst = match.instance[t.rank]
        assert (inst >= 0).all()
        ev = t.collectives.event
        for k, e in zip(inst.tolist(), (t.start[ev] + t.dur[ev]).tolist()):
            ends[k].append(e)
    # The same collective ends at nearly the same time on every rank (one host, one clock): the
    # spread is NCCL's exit skew (tens of µs), far below the time between collectives.
    spreads = [max(v) - min(v) for k, v in ends.items() if k in set(complete.tolist())]
    assert max(spreads) < 250_000
    assert np.median(spreads) < 30_000
    # Matched kernels are the same operation: ranks that arrive early wait, so durations differ, but
    # the shortest (the last to arrive) is the transfer itself and is similar across instances.


def test_same_host_clocks_are_left_as_recorded(nanogpt) -> None:
    al = nanogpt.alignment
    assert al["applied"] is False
    assert all(abs(v) < 10 for v in al["offsets_us"].values())
    assert all(t.clock_offset_ns == 0 for t in nanogpt.ranks)


@pytest.mark.parametrize("folder", ["dlrm-v100-8rank"])
def test_dlrm_loads_with_all_to_all_and_allreduce(folder: str) -> None:
    """DLRM's embedding exchange runs as NCCL SendRecv kernels without a "Collective name": the
    c10d::alltoall_base_ operator that launched them makes them all-to-all, not point-to-point."""
    job = load_job(shared(folder), use_cache=False)
    assert [t.rank for t in job.ranks] == list(range(8))
    for t in job.ranks:
        raw = raw_category_counts(Path(t.file))
        assert t.count(Kind.KERNEL) == raw["kernel"]
        kinds = collections.Counter(CollectiveKind(k) for k in t.collectives.kind)
        assert kinds == {CollectiveKind.ALL_TO_ALL: 5, CollectiveKind.ALL_REDUCE: 3}
        assert sorted(ln.role for ln in t.lanes if ln.is_gpu).count(LaneRole.COMMUNICATION) == 1
    assert job.collective_match.summary()["complete"] == 8


def test_incomplete_folder_is_loaded_and_says_what_is_missing() -> None:
    job = load_job(shared("a100-ddp-2rank"), use_cache=False)
    assert [t.rank for t in job.ranks] == [0]
    assert job.world_size == 2
    assert any("missing: 1" in w for w in job.warnings)
    t = job.ranks[0]
    assert t.count(Kind.KERNEL) == 2700
    kinds = collections.Counter(CollectiveKind(k) for k in t.collectives.kind)
    assert kinds == {CollectiveKind.ALL_REDUCE: 15, CollectiveKind.BROADCAST: 6}
    assert [it.name for it in t.iterations] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    # Collective metadata came from the kernels' own args (sizes known).
    assert (t.collectives.source == 0).all() and (t.collectives.size_bytes > 0).all()


EDGE_FILES = {
    # file: (kernels, rank source, iterations)
    "backward_thread_plain.json": (1, "distributedInfo", ["ProfilerStep#552"]),
    "large_integer.json.gz": (1, "file order", []),
    "legacy_pytorch18_resnet50.pt.trace.json.gz": (
        9538,
        "file order",
        [f"ProfilerStep#{n}" for n in range(5, 11)],
    ),
    "no_distributed_info.json.gz": (0, "file order", ["ProfilerStep#1009"]),
    "no_rank.json.gz": (0, "file order", ["ProfilerStep#1009"]),
    "rocm_mi250_minitoy.json.gz": (14, "file order", ["ProfilerStep#1", "ProfilerStep#2"]),
    "sampled_no_flows_rank-0.json.gz": (1154, "distributedInfo", ["ProfilerStep#551", "ProfilerStep#552"]),
    "sampled_no_flows_rank-1.json.gz": (1104, "distributedInfo", ["ProfilerStep#551", "ProfilerStep#552"]),
    "triton_cuLaunchKernel.json.gz": (1, "file order", ["ProfilerStep#1"]),
}


@pytest.mark.parametrize("name", sorted(EDGE_FILES))
def test_edge_case_files_load(name: str) -> None:
    path = shared("edge-cases", name)
    kernels, source, steps = EDGE_FILES[name]
    job = load_job(path, use_cache=False)
    (t,) = job.ranks
    assert t.count(Kind.KERNEL) == kernels
    assert t.rank_source == source
    assert [it.name for it in t.iterations] == steps
    raw = raw_category_counts(path)
    assert t.count(Kind.KERNEL) == raw.get("kernel", 0) + raw.get("Kernel", 0)
    assert (t.dur >= 0).all() and (t.start >= 0).all()


def test_rank_from_file_name_when_distributed_info_lacks_it() -> None:
    t = parse_trace_file(shared("edge-cases", "sampled_no_flows_rank-1.json.gz"))
    assert t.metadata["distributedInfo"]["rank"] == 1
    job = load_job(shared("edge-cases", "no_rank.json.gz"), use_cache=False)
    assert job.ranks[0].rank == 0 and "file order" in job.rank_rule


def test_links_without_ac2g_flows() -> None:
    t = load_job(shared("edge-cases", "sampled_no_flows_rank-0.json.gz"), use_cache=False).ranks[0]
    assert len(t.flow_id) == 0
    act = np.isin(t.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    assert (t.launch[act] >= 0).mean() > 0.99


def test_triton_cu_launch_kernel_is_linked() -> None:
    t = load_job(shared("edge-cases", "triton_cuLaunchKernel.json.gz"), use_cache=False).ranks[0]
    (k,) = np.flatnonzero(t.kind == Kind.KERNEL)
    assert t.launch[k] >= 0
    assert t.name_of(int(t.launch[k])) == "cuLaunchKernel"


def test_rocm_hip_launches_are_linked() -> None:
    t = load_job(shared("edge-cases", "rocm_mi250_minitoy.json.gz"), use_cache=False).ranks[0]
    k = np.flatnonzero(t.kind == Kind.KERNEL)
    launchers = {t.name_of(int(t.launch[i])) for i in k if t.launch[i] >= 0}
    assert launchers <= {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    assert (t.launch[k] >= 0).sum() == 14


def test_legacy_pytorch18_schema() -> None:
    t = load_job(shared("edge-cases", "legacy_pytorch18_resnet50.pt.trace.json.gz"), use_cache=False).ranks[0]
    raw = raw_category_counts(shared("edge-cases", "legacy_pytorch18_resnet50.pt.trace.json.gz"))
    assert t.count(Kind.CPU_OP) == raw["Operator"] == 42438
    assert t.count(Kind.RUNTIME) == raw["Runtime"] == 10800
    assert t.count(Kind.MEMSET) == raw["Memset"]
    streams = [ln for ln in t.lanes if ln.is_gpu]
    assert [s.stream for s in streams] == [7]  # tid "stream 7" -> stream 7
    assert (t.launch[t.kind == Kind.KERNEL] >= 0).mean() > 0.9  # 'external id' lowercase, legacy flows


def test_backward_thread_is_recognised() -> None:
    t = load_job(shared("edge-cases", "backward_thread_plain.json"), use_cache=False).ranks[0]
    roles = {ln.tid: ln.role for ln in t.lanes if not ln.is_gpu}
    assert roles[24922] == LaneRole.CPU_AUTOGRAD
    assert roles[3914] == LaneRole.CPU_MAIN


def test_large_integer_args_survive() -> None:
    t = load_job(shared("edge-cases", "large_integer.json.gz"), use_cache=False).ranks[0]
    op = int(np.flatnonzero(t.kind == Kind.CPU_OP)[0])
    assert t.args_of(op)["Comms Id"] == 10159970886766084423
    assert t.dur[op] == 100_000


def test_float_microseconds_keep_nanosecond_precision(nanogpt) -> None:
    r0 = nanogpt.rank(0)
    ev = next(e for e in raw_events(Path(r0.file)) if e.get("cat") == "kernel")
    k = np.flatnonzero((r0.kind == Kind.KERNEL) & (r0.correlation == ev["args"]["correlation"]))[0]
    assert r0.dur[k] == round(ev["dur"] * 1000)
    raw_ns = r0.start[k] + r0.raw_shift_ns
    base = json.loads(gzip.decompress(Path(r0.file).read_bytes()))["baseTimeNanoseconds"]
    assert abs(raw_ns - (base + round(ev["ts"] * 1000))) <= 1


def test_cuda_sync_events_and_multi_stream_waits() -> None:
    t = load_job(shared("hta-critical-path", "event_sync_multi_stream.json.gz"), use_cache=False).ranks[0]
    syncs = np.flatnonzero(t.kind == Kind.CUDA_SYNC)
    assert len(syncs) == 5
    kinds = collections.Counter(t.args_of(int(i))["cuda_sync_kind"] for i in syncs)
    assert kinds["Stream Wait Event"] >= 1
    # Each sync event is tied to the runtime call that caused it.
    assert (t.launch[syncs] >= 0).all()
    assert {t.name_of(int(t.launch[i])) for i in syncs} <= {
        "cudaStreamWaitEvent",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaEventQuery",
    }


def test_hf_inference_python_functions() -> None:
    path = shared_file("h100-hf-inference", "Qwen*")
    t = load_job(path, use_cache=False).ranks[0]
    raw = raw_category_counts(path)
    assert t.count(Kind.PYTHON_FUNCTION) == raw["python_function"] == 4262
    assert t.count(Kind.KERNEL) == raw["kernel"] == 1465
