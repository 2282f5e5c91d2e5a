"""Kernel families: names from real traces land in the family an engineer would expect."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.trace.kernel_families import (
    Family,
    classify_kernel_name,
    classify_names,
    event_families,
    family_labels,
)
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Kind


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", Family.GEMM),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", Family.GEMM),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x64_64x3_nn_align2>(x)",
            Family.GEMM,
        ),
        ("volta_sgemm_128x32_nn", Family.GEMM),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", Family.GEMM),
        ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", Family.GEMM),
        ("triton_tem_fused_mm_0", Family.GEMM),
        (
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<x>>>",
            Family.ATTENTION,
        ),
        (
            "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64>>",
            Family.ATTENTION,
        ),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", Family.ATTENTION),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", Family.ATTENTION),
        ("triton_poi_fused__scaled_mm__to_copy_clone_div_lift_fresh_permute_0", Family.ELEMENTWISE),
        ("triton_red_fused__fused_rms_norm__fused_rms_norm_backward_mul_neg_sum_view_3", Family.ELEMENTWISE),
        ("triton_per_fused__flash_attn_backward__unsafe_view_mul_sigmoid_sum_view_10", Family.ELEMENTWISE),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            Family.ELEMENTWISE,
        ),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", Family.ELEMENTWISE),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", Family.ELEMENTWISE),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>", Family.REDUCTION),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Family.NCCL_ALL_GATHER),
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            Family.NCCL_REDUCE_SCATTER,
        ),
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            Family.NCCL_ALL_REDUCE,
        ),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            Family.NCCL_P2P,
        ),
        (
            "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            Family.NCCL_BROADCAST,
        ),
        ("ncclDevKernel_AllToAll_RING_LL", Family.NCCL_ALL_TO_ALL),
        ("Memcpy DtoD (Device -> Device)", Family.MEMCPY),
        ("Memset (Device)", Family.MEMSET),
        ("XXT_kernel", Family.KERNEL_OTHER),
    ],
)
def test_kernel_names_classify_into_their_family(name: str, family: Family) -> None:
    assert classify_kernel_name(name) == family


def test_every_family_has_a_distinct_label_and_nccl_flag() -> None:
    labels = family_labels()
    assert len(labels) == len(set(labels)) == len(Family)
    assert [f for f in Family if f.is_nccl] == list(Family)[Family.NCCL_ALL_REDUCE : Family.NCCL_OTHER + 1]
    assert Family.MEMCPY.is_gpu and not Family.CPU_OP.is_gpu


def test_classify_names_is_vectorised_over_a_string_table() -> None:
    table = ["aten::mm", "nvjet_tst_96x64_64x8_2x4_v_bz_NTN", "ncclDevKernel_AllGather_RING_LL"]
    out = classify_names(table)
    assert out.dtype == np.int8
    assert out.tolist() == [Family.KERNEL_OTHER, Family.GEMM, Family.NCCL_ALL_GATHER]


@needs_shared
def test_nanogpt_rank0_event_families_match_the_trace() -> None:
    job = load_job(shared("h100-nanogpt-8rank"))
    r0 = job.rank(0)
    fam = event_families(r0)
    assert fam.shape == r0.kind.shape and fam.dtype == np.int8
    kernels = r0.kind == Kind.KERNEL
    assert int(kernels.sum()) == 2917
    nccl = np.isin(fam, [f for f in Family if f.is_nccl])
    # the 76 NCCL kernels are exactly the collective rows, 38 ReduceScatter + 38 AllGather
    assert int(nccl.sum()) == 76
    assert sorted(np.flatnonzero(nccl).tolist()) == sorted(r0.collectives.event.tolist())
    assert int((fam == Family.NCCL_REDUCE_SCATTER).sum()) == 38
    assert int((fam == Family.NCCL_ALL_GATHER).sum()) == 38
    # by kind: every memcpy/memset and CPU event keeps its kind's family
    assert int((fam == Family.MEMCPY).sum()) == 542
    assert int((fam == Family.MEMSET).sum()) == 353
    assert int((fam == Family.CPU_OP).sum()) == r0.count(Kind.CPU_OP) == 8896
    # the compute stream is mostly GEMM and fused Triton kernels
    counts = np.bincount(fam[kernels], minlength=len(Family))
    assert counts[Family.GEMM] == 808
    assert counts[Family.ATTENTION] == 203
    assert counts[Family.ELEMENTWISE] == 1630
