"""Replay of the real traces: measured iterations reproduced, cross-rank collectives joined, and
HTA's own critical path for simple_add matched."""

from __future__ import annotations

import gzip
import json

import networkx as nx
import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.graph.export import critical_path_networkx, to_networkx
from lumos_core.graph.model import EdgeKind, NodeType
from lumos_core.replay.run import replay
from lumos_core.trace.loader import load_job

pytestmark = needs_shared

SINGLE_RANK_GPU_TRACES = [
    "a100-ddp-2rank",
    "h100-hf-inference/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "h100-hf-inference/gaunernst_bert-small-uncased__1016001.json.gz",
    "hta-critical-path/simple_add.json.gz",
    "hta-critical-path/alexnet.json.gz",
    "hta-critical-path/event_sync.json.gz",
    "hta-critical-path/event_sync_multi_stream.json.gz",
    "edge-cases/legacy_pytorch18_resnet50.pt.trace.json.gz",
    "edge-cases/rocm_mi250_minitoy.json.gz",
    "edge-cases/sampled_no_flows_rank-0.json.gz",
    "edge-cases/sampled_no_flows_rank-1.json.gz",
    "edge-cases/triton_cuLaunchKernel.json.gz",
    "edge-cases/backward_thread_plain.json",
]


@pytest.fixture(scope="module")
def nanogpt_replay():
    job = load_job(shared("h100-nanogpt-8rank"))
    return job, replay(job)


def test_nanogpt_replay_reproduces_iterations(nanogpt_replay) -> None:
    _job, res = nanogpt_replay
    d = res.as_dict()
    assert d["mean_abs_error_pct"] <= 2.0
    assert len(d["ranks"]) == 8
    for r in d["ranks"]:
        assert [it["name"] for it in r["iterations"]] == [f"ProfilerStep#{n}" for n in range(10, 14)]
        for it in r["iterations"]:
            assert abs(it["error_pct"]) <= 2.0, (r["rank"], it)
            assert it["measured_us"] > 30_000
    # GPU tasks start close to where they were measured: the dependencies explain the schedule.
    assert d["gpu_start_error_us"]["median"] < 50
    assert d["unexplained_delay_us"] < 0.01 * sum(
        it["measured_us"] for r in d["ranks"] for it in r["iterations"]
    )


def test_nanogpt_graph_has_every_dependency_kind(nanogpt_replay) -> None:
    job, res = nanogpt_replay
    counts = res.graph.edge_counts()
    for kind in ("cpu_thread", "cpu_cross", "launch", "sync", "stream", "event_wait", "collective"):
        assert counts[kind] > 0, kind
    # Every complete collective instance joins all 8 ranks: 76 complete instances x 8 kernels.
    assert counts["collective"] == 608
    joins = np.flatnonzero(res.graph.node_type == NodeType.JOIN)
    assert len(joins) == 76
    assert res.graph.n_tasks == sum(int((res.graph.rank == t.rank).sum()) for t in job.ranks) - 608
    launches = sum(int(((t.launch >= 0) & np.isin(t.kind, [4, 5, 6])).sum()) for t in job.ranks)
    assert counts["launch"] == launches


def test_nanogpt_transfer_is_separated_from_waiting(nanogpt_replay) -> None:
    _job, res = nanogpt_replay
    g = res.graph
    transfer = np.flatnonzero(g.arrive_of >= 0)
    arrive = g.arrive_of[transfer]
    waiting = g.measured_start[transfer] - g.measured_start[arrive]  # latest arrival - own arrival
    assert (waiting >= 0).all()
    # Ranks that arrived early waited; their kernels are longer than the transfer itself.
    assert (waiting > 100_000).sum() > 50
    assert (g.dur[transfer] <= g.measured_end[transfer] - g.measured_start[arrive]).all()


def test_slowing_communication_never_shortens_an_iteration(nanogpt_replay) -> None:
    job, base = nanogpt_replay
    slow = replay(job, scale={"nccl": 3.0}, graph=base.graph, critical_paths=False)

    def comm(r) -> int:  # communication time over all iterations (a collective may move between them)
        return sum(
            it.replayed_breakdown.exposed_comm_ns + it.replayed_breakdown.overlapped_ns for it in r.iterations
        )

    for rb, rs in zip(base.ranks, slow.ranks):
        for a, b in zip(rb.iterations, rs.iterations):
            assert b.replayed.length >= a.replayed.length - 1_000
        assert comm(rs) > comm(rb)
    assert slow.mean_abs_error_pct > base.mean_abs_error_pct


@pytest.mark.parametrize("path", SINGLE_RANK_GPU_TRACES)
def test_single_rank_traces_replay_within_two_percent(path: str) -> None:
    job = load_job(shared(path))
    res = replay(job)
    assert res.graph.n_tasks > 0
    assert res.mean_abs_error_pct <= 2.0, res.as_dict()["ranks"]


def test_dlrm_replay_joins_its_all_to_alls_as_collectives() -> None:
    """Its 5 all-to-alls (SendRecv kernels) and 3 all-reduces join all 8 ranks each."""
    job = load_job(shared("dlrm-v100-8rank"))
    res = replay(job)
    counts = res.graph.edge_counts()
    assert counts["p2p"] == 0 and counts["collective"] == (5 + 3) * 8
    assert res.mean_abs_error_pct <= 2.0


def test_critical_path_of_simple_add_matches_hta() -> None:
    path = shared("hta-critical-path", "expected", "simple_add_critical_path_overlay.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    crit = [e for e in doc["traceEvents"] if e.get("ph") == "X" and (e.get("args") or {}).get("critical")]
    hta_length = max(e["ts"] + e["dur"] for e in crit) - min(e["ts"] for e in crit)  # µs
    job = load_job(shared("hta-critical-path", "simple_add.json.gz"))
    res = replay(job)
    cp = res.ranks[0].critical_paths["whole trace"]
    assert cp.length_ns / 1000 == pytest.approx(hta_length, rel=0.01)
    # The GPU kernels on our path are on HTA's path too.
    t = job.ranks[0]
    hta_gpu = {
        (round(e["ts"]), e["name"]) for e in crit if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    }
    ours = [int(res.graph.event[v]) for v in cp.nodes if res.graph.node_type[v] == NodeType.GPU]
    ours_gpu = {(round((t.start[e] + t.raw_shift_ns) / 1000), t.name_of(e)) for e in ours}
    assert len(ours_gpu) >= 10
    assert len(ours_gpu & hta_gpu) / len(ours_gpu) >= 0.8


def test_networkx_export_and_longest_path_agree_with_the_replay() -> None:
    job = load_job(shared("hta-critical-path", "simple_add.json.gz"))
    res = replay(job)
    g = to_networkx(res.graph)
    assert g.number_of_nodes() == res.graph.n_nodes
    assert nx.is_directed_acyclic_graph(g)
    kinds = {d["kind"] for _, _, d in g.edges(data=True)}
    assert {"launch", "cpu_thread", "sync", "stream", "event_wait"} <= kinds
    ours = res.ranks[0].critical_paths["whole trace"]
    assert all(g.has_edge(u, v) for u, v in zip(ours.nodes, ours.nodes[1:]))
    path, length_ns = critical_path_networkx(res.graph, res.start, res.end)
    assert path[-1] == int(np.argmax(res.end))
    assert length_ns == pytest.approx(ours.length_ns, rel=0.01)
    big = load_job(shared("dlrm-v100-8rank"))
    from lumos_core.graph.build import build_graph

    with pytest.raises(ValueError, match="too large"):
        to_networkx(build_graph(big), max_nodes=1000)


def test_edge_kinds_have_labels() -> None:
    assert {k.label for k in EdgeKind} >= {"CPU->GPU launch", "GPU->CPU sync", "rank<->rank collective"}
