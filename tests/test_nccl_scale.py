"""The collective model beyond two nodes (64-12,288 GPUs): the physics it must keep, whatever the
fitted numbers.

Tolerances come from the sources, not from today's output: the NCCL maintainers' multi-node figures
(46-48 GB/s per 400G NIC => 370-385 GB/s bus bandwidth with 8 NICs; ~320 GB/s beyond 2 nodes on
RoCE), the issue's "~125 GB/s achieved across 2-16 nodes of A100s" with its 20 % target, Echo's
2-node sweep (out-of-place vs in-place repeats differ by ~1 %, so 20 % per bandwidth-bound size is
the issue's target, not the noise), and structure: a tree's network hops grow with log2(nodes),
a ring's steps with ranks.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from lumos_core.perf.collective_kinds import as_collective_kind, bus_factor
from lumos_core.perf.nccl import NcclModel
from lumos_core.perf.nccl.algorithms import candidates

GT = (Path(__file__).resolve().parent.parent.parent / "shared" / "ground-truth" / "nccl").resolve()
needs_gt = pytest.mark.skipif(not GT.is_dir(), reason=f"{GT} is absent (published measurements)")

KINDS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv")
GPUS = ("A100", "H100")
RANKS = (16, 64, 128, 512, 1024, 2048, 4096, 12288)
SIZES = [2.0**k for k in range(3, 35, 2)]


def _ring_only(model: NcclModel) -> NcclModel:
    return NcclModel(model.params, model.kernel_floor, algorithms=("ring",))


@pytest.mark.parametrize("gpu", GPUS)
def test_small_all_reduce_latency_grows_with_log_nodes_not_ranks(gpu):
    model = NcclModel.for_gpu(gpu)
    t = {n: model.time("allreduce", 8, n) for n in (64, 512, 12288)}
    # 8 -> 1,536 nodes: log2 grows 3 -> ~11 (x3.7 network hops), ranks x192. Allow the
    # intra-node chain and base latency, which do not grow, to make the ratio smaller, and
    # 20 % above the pure hop ratio.
    hops = math.ceil(math.log2(1536)) / math.log2(8)
    assert 1.3 < t[12288] / t[64] <= 1.2 * hops, t
    assert t[64] < t[512] < t[12288]
    assert t[12288] < 1e-3  # sane: a latency-bound all-reduce on 12,288 GPUs is well under 1 ms
    # A ring alone would be linear in ranks: this is what the tree must save.
    ring = _ring_only(model)
    assert ring.time("allreduce", 8, 12288) / ring.time("allreduce", 8, 64) > 100
    assert model.predict("allreduce", 8, 12288).algorithm in ("tree", "nvls_tree")


@pytest.mark.parametrize("gpu", GPUS)
def test_inter_node_bus_bandwidth_never_above_the_nics(gpu):
    """Ring, tree and PAT move their bus bytes through the node's NICs: their bus bandwidth is at
    most the NICs' achieved rate, and never above line rate; send/recv at most one GPU's share."""
    model = NcclModel.for_gpu(gpu)
    p = model.params
    for kind in ("allreduce", "allgather", "reducescatter", "broadcast"):
        k = as_collective_kind(kind)
        for n, nodes in ((16, 2), (64, 8), (512, 64), (12288, 1536), (64, 64), (1536, 1536)):
            shape = model.shape(n, nodes=nodes)
            nic = p.node_network_bw(shape.per_node)
            for size in SIZES:
                for c in candidates(k, size, shape, p):
                    if c.algorithm in ("nvls", "nvls_tree"):
                        continue  # the switch reduces: fewer bytes cross the NICs than the bus factor says
                    busbw = size * bus_factor(k, n) / c.transfer
                    assert busbw <= nic * (1 + 1e-9), (kind, n, nodes, size, c)
                    assert busbw <= shape.per_node * p.network_gbps * 1e9
    send = model.predict("sendrecv", 2**30, 2, nodes=2)
    assert send.busbw <= p.network_gbps * p.network_efficiency * 1e9 * (1 + 1e-9)


def test_large_all_reduce_bus_bandwidth_plateaus_at_the_maintainers_figures():
    """H100, 8 x 400G NICs per node: ~320 (RoCE, >2 nodes) to 370-385 GB/s (IB, 46-48 per NIC)
    for large messages, flat in the node count; never the NVLS-on-one-node 480."""
    model = NcclModel.for_gpu("H100")
    bws = [model.predict("allreduce", 8 * 2**30, 8 * nodes).busbw / 1e9 for nodes in (4, 8, 64, 256, 1536)]
    for bw in bws:
        assert 320 * 0.95 <= bw <= 385, bws
    assert all(b <= a * (1 + 1e-9) for a, b in zip(bws, bws[1:])), bws


def test_a100_bus_bandwidth_across_2_to_16_nodes_near_the_issues_125():
    """The issue: achieved inter-node bus bandwidth ~125 GB/s on 2-16 nodes of A100s with one
    200 Gb/s NIC per GPU; its target is 20 %."""
    model = NcclModel.for_gpu("A100", gpus_per_node=8, network_gbps=25)
    for n in (16, 32, 64, 128):
        for size in (2**30, 4 * 2**30):
            bw = model.predict("allreduce", size, n).busbw / 1e9
            assert abs(bw / 125 - 1) <= 0.20, (n, size, bw)


@pytest.mark.parametrize("gpu", GPUS)
def test_every_kind_monotone_in_size_and_ranks(gpu):
    model = NcclModel.for_gpu(gpu)
    for kind in KINDS:
        for n in RANKS:
            ts = [model.predict(kind, s, n).seconds for s in SIZES]
            assert all(b >= a * (1 - 1e-9) for a, b in zip(ts, ts[1:])), (kind, n)
        if kind == "sendrecv":
            continue  # one peer whatever the group: constant
        for s in (8, 2**20, 2**30):
            ts = [model.predict(kind, s, n).seconds for n in RANKS]
            assert all(b >= a * (1 - 1e-9) for a, b in zip(ts, ts[1:])), (kind, s)


def test_one_gpu_per_node_gather_uses_pat_logarithmic_steps():
    """A data-parallel group of a TP=8 job (one GPU per node): NCCL's PAT (log2(nodes) steps plus
    the small per-rank term NCCL's tuner keeps) beats the ring's 1,535 network hops."""
    model = NcclModel.for_gpu("H100")
    for kind in ("allgather", "reducescatter"):
        pat = model.predict(kind, 2**20, 1536, nodes=1536)
        ring = _ring_only(model).predict(kind, 2**20, 1536, nodes=1536)
        assert pat.algorithm == "pat" and pat.seconds < 0.8 * ring.seconds
    # With several GPUs per node NCCL has no PAT: the ring, linear in ranks.
    assert model.predict("allgather", 2**20, 12288).algorithm == "ring"


def test_all_to_all_pays_per_remote_peer_send_recv_does_not():
    model = NcclModel.for_gpu("H100")
    a64, a12k = model.time("alltoall", 8, 64), model.time("alltoall", 8, 12288)
    assert a12k > 20 * a64  # 56 -> 12,280 remote peers, one proxy post per send and per receive
    assert model.time("sendrecv", 8, 12288) == pytest.approx(model.time("sendrecv", 8, 16))
    # Bandwidth-bound: each GPU's share of the NICs carries the off-node part.
    p = model.params
    big = model.predict("alltoall", 8 * 2**30, 12288)
    assert big.algbw * (12288 - 8) / 12288 <= p.gpu_network_bw(8) * (1 + 1e-9)


@needs_gt
def test_echo_two_nodes_every_bandwidth_bound_size_within_target():
    """Echo's 2 nodes x 8 A100 (in-sample for the A100 NIC efficiency): from 16 MiB up, where
    time is bandwidth-bound, every size within the issue's 20 %."""
    with open(GT / "echo-a100" / "allreduce_a100_1-16gpus.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["n_gpus"]) == 16 and float(r["size_B"]) >= 2**24]
    assert len(rows) >= 10
    model = NcclModel.for_gpu("A100", gpus_per_node=8, network_gbps=25)
    for r in rows:
        pred = model.predict("allreduce", float(r["size_B"]), 16)
        assert abs(pred.seconds / (float(r["oop_time_us"]) * 1e-6) - 1) <= 0.20, r["size_B"]


def test_lumos_comm_algo_restriction_like_nccl_algo(capsys):
    import json

    from lumos_core.cli import main

    args = ["comm", "allreduce", "--bytes", "8", "--ranks", "12288", "--json"]
    assert main(args) == 0
    free = json.loads(capsys.readouterr().out)
    assert main([*args, "--algo", "Ring", "--proto", "LL"]) == 0
    ring = json.loads(capsys.readouterr().out)
    assert free["algorithm"] != "ring" and (ring["algorithm"], ring["protocol"]) == ("ring", "LL")
    assert ring["time_us"] > 100 * free["time_us"]
    assert main([*args, "--algo", "butterfly"]) == 2
    assert "--algo: unknown 'butterfly'" in capsys.readouterr().err


def test_lumos_comm_says_when_a_forced_algorithm_falls_back(capsys):
    """NVLS does not exist on an A100: the model falls back to NCCL's own choice, and the output
    must say so rather than print the ring figure as if it answered --algo nvls."""
    import json

    from lumos_core.cli import main

    args = ["comm", "allreduce", "--bytes", "1GiB", "--ranks", "8", "--gpu", "A100", "--algo", "nvls"]
    assert main(args) == 0
    assert "--algo nvls cannot run" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert "--algo nvls" in json.loads(capsys.readouterr().out)["note"]
    assert main(["comm", "allreduce", "--bytes", "1GiB", "--ranks", "8", "--gpu", "H100", "--algo", "nvls", "--json"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)
