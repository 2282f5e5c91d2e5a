"""Roofline kernel times, alpha-beta collectives and the calibrated CommModel (hand-computed values)."""

from __future__ import annotations

import pickle

import pytest

from lumos_core.perf.costs import (
    CommModel,
    CommSample,
    as_collective_kind,
    attention_flops,
    attention_time,
    bus_factor,
    collective_time,
    gemm_flops,
    gemm_time,
    latency_steps,
    memory_time,
    spans_nodes,
)
from lumos_core.perf.hardware import get_gpu
from lumos_core.trace.model import CollectiveKind as CK

H100 = get_gpu("H100")


def test_gemm_compute_bound_square():
    # 2 * 4096^3 = 137,438,953,472 FLOPs at 989.4e12 * 0.70 = 6.9258e14 FLOP/s -> 198.44 µs
    assert gemm_flops(4096, 4096, 4096) == 137_438_953_472
    assert gemm_time(4096, 4096, 4096, H100) == pytest.approx(198.4449e-6, rel=1e-5)


def test_gemm_memory_bound_gemv():
    # 1x4096 @ 4096x4096: bytes = 2 * (4096 + 16,777,216 + 4096) = 33,570,816 at 2.68e12 B/s -> 12.526 µs
    assert gemm_time(1, 4096, 4096, H100) == pytest.approx(12.5264e-6, rel=1e-4)


def test_gemm_fp32_uses_cuda_core_peak_and_floor():
    # 2 * 1024^3 = 2.147e9 FLOPs at 67e12 * 0.70 -> 45.79 µs
    assert gemm_time(1024, 1024, 1024, H100, dtype_bytes=4) == pytest.approx(45.789e-6, rel=1e-4)
    assert gemm_time(8, 8, 8, H100) == H100.kernel_floor


def test_attention_flops_and_time():
    # 4 * 1 * 32 * 2048 * 2048 * 128 / 2 (causal) = 34,359,738,368; backward 2.5x
    assert attention_flops(1, 32, 2048, 128) == 34_359_738_368
    assert attention_flops(1, 32, 2048, 128, backward=True) == 85_899_345_920
    assert attention_flops(1, 32, 2048, 128, causal=False) == 68_719_476_736
    # 34.36e9 / (989.4e12 * 0.45) = 77.17 µs
    assert attention_time(1, 32, 2048, 128, H100) == pytest.approx(77.172e-6, rel=1e-4)


def test_memory_time():
    # 1 GB at 3.35e12 * 0.8 = 2.68e12 B/s -> 373.13 µs
    assert memory_time(1e9, H100) == pytest.approx(373.134e-6, rel=1e-5)


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor(CK.ALL_GATHER, 8) == pytest.approx(0.875)
    assert bus_factor("_reduce_scatter_base", 4) == pytest.approx(0.75)
    assert bus_factor("all_to_all", 2) == pytest.approx(0.5)
    assert bus_factor("broadcast", 16) == 1.0
    assert bus_factor("send", 2) == bus_factor("recv", 2) == 1.0
    assert bus_factor("allreduce", 1) == 0.0
    assert latency_steps("allreduce", 8, "ring") == 14 and latency_steps("allreduce", 8, "tree") == 6
    assert latency_steps("allgather", 16) == 15 and latency_steps("send", 2) == 1


def test_allreduce_intra_node_ring():
    # ring: 14 steps * 1 µs + 1e9 B * 1.75 / (450e9 * 0.8) = 14 µs + 4861.11 µs
    assert collective_time("allreduce", 1e9, 8, H100) == pytest.approx(4875.111e-6, rel=1e-6)
    # tree is slower on bandwidth: 6 µs + 2e9 / 360e9 = 5561.56 µs; auto keeps the ring
    tree = collective_time("allreduce", 1e9, 8, H100, algorithm="tree")
    assert tree == pytest.approx(5561.556e-6, rel=1e-6)


def test_small_allreduce_across_nodes_prefers_tree():
    # 64 GPUs, 8 bytes: ring 126 * 5 µs = 630 µs; tree 12 * 5 µs = 60 µs (+ 16 B / 42.5e9)
    assert collective_time("allreduce", 8, 64, H100, inter_node=True, algorithm="ring") == pytest.approx(
        630e-6, rel=1e-6
    )
    assert collective_time("allreduce", 8, 64, H100, inter_node=True) == pytest.approx(60.0004e-6, rel=1e-6)


def test_allgather_and_send():
    # 15 steps * 5 µs + 1e9 * 15/16 / (50e9 * 0.85) = 75 µs + 22058.82 µs
    gather = collective_time("allgather", 1e9, 16, H100, inter_node=True)
    assert gather == pytest.approx(22133.82e-6, rel=1e-6)
    # 1 µs + 1e8 / 360e9 = 278.78 µs
    assert collective_time("send", 1e8, 2, H100) == pytest.approx(278.778e-6, rel=1e-5)
    assert collective_time("allreduce", 1e6, 1, H100) == H100.kernel_floor


def test_spans_nodes():
    assert not spans_nodes([0, 1, 7], 8)
    assert spans_nodes([7, 8], 8)
    assert spans_nodes([0, 16, 32], 8)


def test_kind_names():
    assert as_collective_kind("_allgather_base") == CK.ALL_GATHER
    assert as_collective_kind("reduce_scatter_tensor") == CK.REDUCE_SCATTER
    assert as_collective_kind("ALL_REDUCE") == CK.ALL_REDUCE
    assert as_collective_kind("frobnicate") == CK.UNKNOWN


def _line(a, bw, kind, n, sizes, inter=False):
    f = bus_factor(kind, n)
    return [CommSample(as_collective_kind(kind), s, n, a + s * f / bw, inter) for s in sizes]


def test_comm_model_fits_latency_and_bandwidth():
    samples = _line(10e-6, 300e9, "allreduce", 8, [1e6, 1e7, 1e8, 5e8])
    model = CommModel.from_profile("H100").calibrate(samples)
    fit = model.fit_for("allreduce", False)
    assert fit is not None and fit.source == "fitted" and fit.n_samples == 4
    assert fit.latency == pytest.approx(10e-6, rel=1e-6)
    assert fit.bandwidth == pytest.approx(300e9, rel=1e-6)
    # 10 µs + 2e8 * 1.75 / 300e9 = 1176.67 µs
    assert model.time("allreduce", 2e8, 8) == pytest.approx(1176.667e-6, rel=1e-6)
    # all-gather has no data in this scope: it uses the pooled intra-node fit (same links)
    assert model.source("allgather") == "pooled"
    assert model.time("allgather", 8e8, 8) == pytest.approx(10e-6 + 8e8 * 0.875 / 300e9, rel=1e-6)
    # no inter-node data, and p2p is never pooled with collectives: both use the profile
    assert model.source("allreduce", inter_node=True) == "profile"
    assert model.source("send") == "profile"
    assert model.time("send", 1e8, 2) == pytest.approx(collective_time("send", 1e8, 2, H100))
    text = "\n".join(model.describe())
    assert "AllReduce intra-node: fitted from 4 samples: latency 10.0 µs, bus bandwidth 300.0 GB/s" in text
    assert pickle.loads(pickle.dumps(model)) == model


def test_comm_model_negative_intercept_refits_through_origin():
    # Two points on t = S/B with a tiny negative offset: the fit clamps a to 0 and refits B.
    samples = [
        CommSample(CK.REDUCE_SCATTER, 1e8, 4, 1e8 * 0.75 / 200e9 - 1e-6),
        CommSample(CK.REDUCE_SCATTER, 4e8, 4, 4e8 * 0.75 / 200e9 - 1e-6),
    ]
    fit = CommModel.from_profile().calibrate(samples).fit_for("reduce_scatter", False)
    assert fit is not None and fit.latency == 0.0
    assert fit.bandwidth == pytest.approx(200e9, rel=0.01)


def test_comm_model_without_enough_data_uses_profile():
    one = _line(10e-6, 300e9, "allreduce", 8, [1e8])
    model = CommModel.from_profile().calibrate(one)
    assert model.fits == {}
    assert model.time("allreduce", 1e9, 8) == pytest.approx(collective_time("allreduce", 1e9, 8, H100))
