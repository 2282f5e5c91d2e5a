"""Names of the kernels a Megatron-LM step launches on each GPU generation (as the profiler records
them), for the synthetic traces."""

from __future__ import annotations

GEMM_NAMES = {
    # (compute capability major) -> cuBLAS kernel name pattern; {op} is tn (forward), nn, nt
    10: "sm100_xmma_gemm_bf16bf16_bf16f32_f32_{op}_n_tilesize256x128x64_cluster2x1x1_execute_segment_k_off_kernel__5x_cublas",
    9: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{op}_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    8: "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_{op}",
    7: "volta_h884gemm_256x128_ldg8_{op}",
}
FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
    "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
FLASH_BWD = (
    "void pytorch_flash::flash_bwd_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, "
    "false, false, false, false, true>(pytorch_flash::Flash_bwd_params)"
)
LN_FWD = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, "
    "float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
    "c10::BFloat16*)"
)
LN_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, "
    "float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
    "c10::BFloat16 const*, c10::BFloat16*, int)"
)


def elementwise_kernel(functor: str, arity: int) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, {arity}ul> >"
        f"(int, {functor}, std::array<char*, {arity}ul>)"
    )


ADD = elementwise_kernel("at::native::CUDAFunctor_add<c10::BFloat16>", 3)
GELU = elementwise_kernel(
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const"
    "::{lambda(c10::BFloat16)#1}",
    2,
)
GELU_BWD = elementwise_kernel(
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}"
    "::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}",
    3,
)
FILL = elementwise_kernel("at::native::FillFunctor<c10::BFloat16>", 1)
EXP_SUB = elementwise_kernel(
    "at::native::(anonymous namespace)::exp_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const"
    "::{lambda(float)#1}",
    2,
)
SOFTMAX_GRAD = elementwise_kernel("at::native::binary_internal::MulFunctor<float>", 3)
REDUCE_MAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::MaxOps<float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
    "at::native::MaxOps<float>, unsigned int, float, 4>)"
)
REDUCE_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >"
    "(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor"
    "<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4>)"
)
EMBED_FWD = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, "
    "2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
    "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, "
    "unsigned int>, int, int, unsigned int, unsigned int, long)"
)
EMBED_BWD = (
    "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, "
    "long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)"
)
ADAM = (
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, int, float, float, float, "
    "float, float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float>, "
    "int, float, float, float, float, float, float, adamMode_t, float)"
)
L2NORM = (
    "void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float, 512, 8>, float*, float*, "
    "bool, int>(long, int volatile*, TensorListMetadata<1>, L2NormFunctor<float, 512, 8>, float*, float*, "
    "bool, int)"
)
SWIGLU = elementwise_kernel("at::native::silu_mul_kernel<c10::BFloat16>", 3)
SWIGLU_BWD = elementwise_kernel("at::native::silu_mul_backward_kernel<c10::BFloat16>", 5)
RMS_FWD = "void rmsnorm_fwd_tuned_kernel<c10::BFloat16, float>(RMSNormParams)"
RMS_BWD = "void rmsnorm_bwd_tuned_kernel<c10::BFloat16, float>(RMSNormParams)"
SOFTMAX_FWD = "void scaled_upper_triang_masked_softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 11>"
SOFTMAX_BWD = "void scaled_upper_triang_masked_softmax_warp_backward<c10::BFloat16, c10::BFloat16, float, 11>"
DROPOUT = elementwise_kernel("at::native::fused_dropout_kernel_vec<c10::BFloat16, float>", 3)
BMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_{op}"
