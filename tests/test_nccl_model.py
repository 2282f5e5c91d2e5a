"""The NCCL-style collective model: checked against published NCCL measurements (DGX H100
all-reduce sweep, NVIDIA maintainers' reference points) and for its structure (hops, link
ceilings, algorithm choice, calibration), plus ``lumos comm``.

Tolerances come from the issue's target (within 15 % of measured time from 1 MiB up; the
algorithm NCCL picks where the source names it), not from today's result. Note: the DGX sweep is
in-sample for two parameters (NVLS efficiency and the Simple ramp size were chosen on it); the
H200/H100 reference points by GPU count and the multi-node NIC figures are not fitted.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from lumos_core.cli import main
from lumos_core.perf.nccl import CollectiveSample, GroupShape, NcclModel, shape_of_strided_group
from lumos_core.trace.model import CollectiveKind as CK

GROUND_TRUTH = (Path(__file__).resolve().parent.parent.parent / "shared" / "ground-truth" / "nccl").resolve()
needs_ground_truth = pytest.mark.skipif(
    not GROUND_TRUTH.is_dir(),
    reason=f"published NCCL measurements not available: {GROUND_TRUTH} does not exist",
)
TOLERANCE = 0.15  # the target


@needs_ground_truth
def test_dgx_h100_all_reduce_sweep_within_15_percent_from_1mib():
    with (GROUND_TRUTH / "h100_8gpu_all_reduce_dgx.csv").open() as f:
        rows = list(csv.DictReader(f))
    model = NcclModel.for_gpu("H100")
    checked = 0
    for r in rows:
        size = int(r["size_B"])
        if size < 2**20:
            continue
        measured = float(r["oop_time_us"]) * 1e-6
        pred = model.predict("allreduce", size, int(r["n_gpus"]), nodes=int(r["n_nodes"]))
        assert abs(pred.seconds / measured - 1) <= TOLERANCE, (size, pred.seconds, measured)
        checked += 1
    assert checked >= 14
    # The source names NVLS (NVLink SHARP) for its peak at 8 GiB.
    assert model.predict("allreduce", 8 * 2**30, 8).algorithm == "nvls"


@needs_ground_truth
def test_reference_points_nvls_vs_ring_by_gpu_count():
    """H200 x8, 8 GiB (ml-engineering, NCCL 2.27.7): NVLS and ring bus bandwidth for 4..8 GPUs;
    NCCL picks NVLS where it is faster (5..8 GPUs), and the two tie at 4."""
    text = (GROUND_TRUTH / "h100_nccl_reference_points.csv").read_text()
    assert "4:363.3/363.3, 5:414.2/364.4, 6:435.6/365.1, 7:460.0/365.7, 8:473.1/365.6" in text
    measured = {4: (363.3, 363.3), 5: (414.2, 364.4), 6: (435.6, 365.1), 7: (460.0, 365.7), 8: (473.1, 365.6)}
    model = NcclModel.for_gpu("H200")
    ring_only = NcclModel(model.params, model.kernel_floor, algorithms=("ring",))
    for n, (nvls, ring) in measured.items():
        best = model.predict("allreduce", 8 * 2**30, n)
        assert abs(best.busbw / 1e9 / max(nvls, ring) - 1) <= TOLERANCE, (n, best.busbw)
        assert abs(ring_only.predict("allreduce", 8 * 2**30, n).busbw / 1e9 / ring - 1) <= TOLERANCE
        if nvls > ring * 1.05:
            assert best.algorithm == "nvls", n
    # Ring at 2..8 GPUs on one H100 node: ~365-370 GB/s whatever the count (nccl#1455).
    for n in range(2, 9):
        bw = ring_only.predict("allreduce", 4 * 2**30, n).busbw / 1e9
        assert abs(bw / 367.5 - 1) <= TOLERANCE, (n, bw)


@needs_ground_truth
def test_reference_points_multi_node():
    """46-48 GB/s per 400G NIC across nodes (=> ~370-385 GB/s bus bandwidth with 8 NICs per node),
    and NVLS gains shrinking beyond two nodes (nccl#1221)."""
    text = (GROUND_TRUTH / "h100_nccl_reference_points.csv").read_text()
    assert "46-48 GB/s per 400G NIC" in text
    model = NcclModel.for_gpu("H100")
    ring = NcclModel(model.params, model.kernel_floor, algorithms=("ring",))
    for nodes in (2, 4):
        bw = ring.predict("allreduce", 8 * 2**30, 8 * nodes, nodes=nodes).busbw / 1e9
        assert abs(bw / 377.5 - 1) <= TOLERANCE, (nodes, bw)
    # One GPU per node: that GPU's single NIC is the ceiling (46-48 GB/s).
    bw = ring.predict("allreduce", 8 * 2**30, 4, nodes=4).busbw / 1e9
    assert abs(bw / 47 - 1) <= TOLERANCE
    gain2 = model.predict("allreduce", 8 * 2**30, 16).busbw / ring.predict("allreduce", 8 * 2**30, 16).busbw
    gain4 = model.predict("allreduce", 8 * 2**30, 32).busbw / ring.predict("allreduce", 8 * 2**30, 32).busbw
    assert gain2 > 1.1 and gain4 < gain2


def test_latency_grows_with_hops_and_network_hops_cost_more():
    model = NcclModel(NcclModel.for_gpu("H100").params, algorithms=("ring",))
    small = [model.time("allreduce", 8, n) for n in (2, 4, 8)]
    assert small[0] < small[1] < small[2]
    intra = model.predict("allreduce", 8, 16, nodes=1)
    inter = model.predict("allreduce", 8, 16, nodes=2)
    assert inter.seconds > intra.seconds
    # A tree's network hops grow with log2(nodes): at 64 nodes it beats the ring on small messages.
    full = NcclModel.for_gpu("H100")
    assert full.predict("allreduce", 64 * 2**10, 512).algorithm == "tree"


def test_per_link_ceilings_and_one_nic_per_node():
    model = NcclModel.for_gpu("H100")
    big = 4 * 2**30
    packed = model.predict("allreduce", big, 64)  # 8 nodes x 8 GPUs: 8 NICs per node
    strided = model.predict("allreduce", big, 64, nodes=64)  # DP group of a TP=8 job: 1 NIC per node
    assert strided.seconds > 5 * packed.seconds
    assert strided.busbw < model.params.network_gbps * 1e9
    faster_net = NcclModel.for_gpu("H100", network_gbps=100).predict("allreduce", big, 64, nodes=64)
    assert faster_net.seconds < 0.6 * strided.seconds
    # A single node never touches the network.
    assert NcclModel.for_gpu("H100", network_gbps=1).time("allreduce", big, 8) == pytest.approx(
        model.time("allreduce", big, 8)
    )


def test_every_kind_is_costed_and_bus_bandwidth_follows_nccl_tests():
    model = NcclModel.for_gpu("A100")
    for kind in (
        "allreduce",
        "allgather",
        "reducescatter",
        "broadcast",
        "reduce",
        "alltoall",
        "send",
        "barrier",
    ):
        pred = model.predict(kind, 64 * 2**20, 16)
        assert pred.seconds > 0 and math.isfinite(pred.seconds), kind
    ag = model.predict("allgather", 2**30, 8)
    assert ag.busbw == pytest.approx(ag.algbw * 7 / 8)
    assert model.predict("allreduce", 2**20, 1).algorithm == "none"
    assert not model.params.nvls  # A100 has no NVLink SHARP
    assert model.predict("allreduce", 2**30, 8).algorithm == "ring"


def test_group_shapes_from_megatron_strides():
    assert shape_of_strided_group(8, 1, 8) == GroupShape(8, 1, 8)
    assert shape_of_strided_group(64, 8, 8) == GroupShape(64, 64, 1)
    assert shape_of_strided_group(16, 2, 8) == GroupShape(16, 4, 4)


def test_calibration_recovers_latency_and_bandwidth_scales():
    truth = NcclModel.for_gpu("H100")
    p = truth.params
    from dataclasses import replace

    slow = NcclModel(replace(p, latency_scale_intra=2.0, bandwidth_scale_intra=0.5))
    samples = [
        CollectiveSample(CK.ALL_REDUCE, s, GroupShape.single_node(8), slow.time("allreduce", s, 8))
        for s in (2**16, 2**20, 2**24, 2**28)
    ]
    fitted = truth.calibrate(samples)
    for s in (2**18, 2**22, 2**26, 2**30):
        assert fitted.time("allreduce", s, 8) == pytest.approx(slow.time("allreduce", s, 8), rel=0.1)
    assert fitted.source(inter_node=False).startswith("fitted on 4 samples")
    assert fitted.source(inter_node=True) == "profile"  # no inter-node sample: the profile stays
    assert fitted.params.bandwidth_scale_inter == 1.0


def test_lumos_comm_json_and_errors(capsys):
    assert main(["comm", "allreduce", "--bytes", "1GiB", "--ranks", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"time_us", "algorithm", "protocol", "algbw_gbps", "busbw_gbps"}
    assert out["algorithm"] == "nvls" and out["protocol"] == "Simple"
    assert out["busbw_gbps"] == pytest.approx(out["algbw_gbps"] * 2 * 7 / 8)
    assert (
        main(
            [
                "comm",
                "allreduce",
                "--bytes",
                "1GiB",
                "--ranks",
                "16",
                "--gpus-per-node",
                "4",
                "--nvlink-gbps",
                "300",
                "--network-gbps",
                "25",
                "--gpu",
                "A100",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "4 node(s)" in text and "predicted time" in text
    assert main(["comm", "frobnicate", "--bytes", "1", "--ranks", "2"]) == 2
    assert "unknown collective" in capsys.readouterr().err
    assert main(["comm", "allreduce", "--bytes", "1", "--ranks", "2", "--nodes", "3"]) == 2
    capsys.readouterr()
    # one rank: no link is crossed, so no bandwidth is printed (bytes over a launch time is nonsense)
    assert main(["comm", "allreduce", "--bytes", "64MiB", "--ranks", "1"]) == 0
    text = capsys.readouterr().out
    assert "one rank" in text and "GB/s\n" not in text.split("collectives on")[0]


def test_size_for_time_inverts_the_prediction():
    model = NcclModel.for_gpu("H100")
    shape = GroupShape.single_node(8)
    for size in (4096, 2**20, 150e6):
        t = model.predict("allgather", size, shape).seconds
        assert model.size_for_time("allgather", t, shape) == pytest.approx(size, rel=0.03)
