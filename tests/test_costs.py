"""Roofline kernel times (hand-computed values), NCCL-tests conventions, and collective_time as the
uncalibrated NCCL model (the model itself is tested in test_nccl_model.py)."""

from __future__ import annotations

import pytest

from lumos_core.perf.costs import (
    as_collective_kind,
    attention_flops,
    attention_time,
    bus_factor,
    collective_time,
    gemm_flops,
    gemm_time,
    memory_time,
    spans_nodes,
    wave_factor,
)
from lumos_core.perf.hardware import get_gpu
from lumos_core.perf.nccl import NcclModel
from lumos_core.trace.model import CollectiveKind as CK

H100 = get_gpu("H100")


def test_gemm_compute_bound_square():
    # 2 * 4096^3 = 137,438,953,472 FLOPs; 128 x 256 tiles: 32 x 16 = 512 tiles on 132 SMs -> 4 waves,
    # each tile as if K were 4096 + 128 deep (pipeline fill, epilogue): 4 * 132 * 128 * 256 * 4224 /
    # 4096^3 = 1.063477 of the FLOPs keep SMs busy; at 989.4e12 * 0.70 (the profile's prior) =
    # 6.9258e14 FLOP/s -> 211.04 µs, plus the GEMM curve's 6.3 µs per kernel
    assert (H100.gemm_efficiency, H100.gemm_fixed) == (0.70, 6.3e-6)
    assert gemm_flops(4096, 4096, 4096) == 137_438_953_472
    assert wave_factor(4096, 4096, 4096, 132) == pytest.approx(1.0634766, rel=1e-6)
    assert gemm_time(4096, 4096, 4096, H100) == pytest.approx(217.343e-6, rel=1e-4)
    assert gemm_time(4096, 4096, 4096, H100, efficiency=0.70) == pytest.approx(211.043e-6, rel=1e-4)


def test_wave_factor_counts_idle_sms_of_small_and_narrow_gemms():
    # 1024 x 128 output (a tensor-parallel shard) on 108 SMs: split-K by 4 (K 4096 -> slices of
    # 1024), 128 x 64 tiles at 0.8 of the big tiles' rate: 8 x 2 x 4 = 64 blocks, one wave with 44
    # SMs idle, each tile 1024 + 128 deep: 108 * 128 * 64 * 1152 / (1024 * 128 * 4096) / 0.8 = 2.37
    # (the best choice)
    assert wave_factor(1024, 128, 4096, 108) == pytest.approx(108 * 128 * 64 * 1152 / (1024 * 128 * 4096) / 0.8)
    # one full wave of big, deep tiles costs only the tile's fill and epilogue; never below 1
    assert wave_factor(108 * 256, 128, 8192, 108) == pytest.approx((8192 + 128) / 8192)
    # batched products share the waves: 16 products of 1024 x 1024 (K 64) fill 108 SMs better than one
    assert wave_factor(1024, 1024, 64, 108, batch=16) < wave_factor(1024, 1024, 64, 108)
    # hence an 8-way shard of a 1024-wide layer reaches a lower fraction of peak than the whole layer
    a100 = get_gpu("A100")
    eff = [gemm_flops(1024, n, 1024) / gemm_time(1024, n, 1024, a100) for n in (4096, 512)]
    assert eff[1] < 0.8 * eff[0]


def test_gemm_memory_bound_gemv():
    # 1x4096 @ 4096x4096: bytes = 2 * (4096 + 16,777,216 + 4096) = 33,570,816 at 2.68e12 B/s -> 12.526 µs
    assert gemm_time(1, 4096, 4096, H100) == pytest.approx(12.5264e-6, rel=1e-4)


def test_gemm_fp32_uses_cuda_core_peak_and_floor():
    # 2 * 1024^3 = 2.147e9 FLOPs x wave_factor (tiles, waves, fill) at 67e12 * 0.70 (+ 6.3 µs per kernel)
    f = wave_factor(1024, 1024, 1024, 132)
    assert 1.0 < f < 1.5
    assert gemm_time(1024, 1024, 1024, H100, dtype_bytes=4) == pytest.approx(2.147483648e9 * f / (67e12 * 0.7) + 6.3e-6)
    assert gemm_time(8, 8, 8, H100, efficiency=0.7) == H100.kernel_floor


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


def test_collective_time_is_the_nccl_model_of_the_profile():
    model = NcclModel.for_gpu(H100)
    assert collective_time("allreduce", 1e9, 8, H100) == model.time("allreduce", 1e9, 8)
    # a group spanning nodes: packed 8 to a node, at least two nodes
    assert (
        collective_time("allgather", 1e9, 16, H100, inter_node=True)
        == model.predict("allgather", 1e9, 16, nodes=2).seconds
    )
    assert collective_time("allreduce", 1e6, 1, H100) == H100.kernel_floor
    with pytest.raises(ValueError):
        collective_time("allreduce", 1e6, 8, H100, algorithm="butterfly")


def test_restricting_the_algorithm_never_makes_a_collective_faster():
    for n, inter in ((8, False), (64, True)):
        for size in (8, 1e6, 1e9):
            best = collective_time("allreduce", size, n, H100, inter_node=inter)
            ring = collective_time("allreduce", size, n, H100, inter_node=inter, algorithm="ring")
            assert best <= ring
    # small messages across 64 nodes: the tree's log2(nodes) network hops beat the ring's 2(nodes-1)
    assert collective_time("allreduce", 8, 512, H100, algorithm="tree") < collective_time(
        "allreduce", 8, 512, H100, algorithm="ring"
    )


def test_spans_nodes():
    assert not spans_nodes([0, 1, 7], 8)
    assert spans_nodes([7, 8], 8)
    assert spans_nodes([0, 16, 32], 8)


def test_kind_names():
    assert as_collective_kind("_allgather_base") == CK.ALL_GATHER
    assert as_collective_kind("reduce_scatter_tensor") == CK.REDUCE_SCATTER
    assert as_collective_kind("ALL_REDUCE") == CK.ALL_REDUCE
    assert as_collective_kind("frobnicate") == CK.UNKNOWN


def test_gemm_curve_saturates_and_fits_with_the_profile_as_prior():
    from lumos_core.perf.kernel_curves import fit_curve, profile_curves

    prior = profile_curves("A100")["gemm"]
    # efficiency rises with size and saturates at the asymptote
    effs = [prior.achieved(w) for w in (1e8, 1e9, 1e10, 1e11, 1e12)]
    assert effs == sorted(effs) and effs[-1] < prior.efficiency and effs[-1] > 0.97 * prior.efficiency
    # small GEMMs: doubling the work costs much less than 2x
    assert prior.time(2e8) / prior.time(1e8) < 1.5
    # kernels from a "true" curve (60 %, 8 µs) are recovered; the prior only pulls gently
    truth = {"efficiency": 0.60, "fixed": 8e-6}
    work = [1e8, 1e9, 1e10, 1e11, 1e12, 5e12]
    secs = [truth["fixed"] + w / (prior.peak * truth["efficiency"]) for w in work]
    fit = fit_curve(prior, work, secs)
    assert fit.efficiency == pytest.approx(0.60, rel=0.05) and fit.fixed == pytest.approx(8e-6, rel=0.15)
    assert fit.n_samples == 6 and fit.source.startswith("fitted")
    assert fit_curve(prior, [], []) == prior
