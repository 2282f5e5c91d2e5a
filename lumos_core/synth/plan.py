"""The operation sequence of one Megatron-LM training step on one pipeline stage.

A :class:`StagePlan` is the program every rank of a stage runs each iteration, as a list of small
instruction tuples (opcode first) plus tables of kernel and communication descriptors. Ranks of a
stage share one plan; what differs per rank (process groups, peers, whether a group spans nodes,
jitter) is resolved by :mod:`.timeline` when it runs the plan.

What a step contains (Megatron-LM with the distributed optimizer, ``overlap_grad_reduce``,
tensor parallelism without sequence parallelism, untied embeddings):

* ``ProfilerStep#N`` around everything; a fill kernel zeroes the gradient buffer;
* the pipeline schedule (:func:`lumos_core.whatif.schedules.pipeline_steps`): forward steps on the main
  thread, backward steps on the autograd thread (``pt_autograd_0``), p2p groups on the main
  thread with one NCCL stream per peer;
* per layer forward: LayerNorm, QKV GEMM, flash attention, projection GEMM, TP all-reduce,
  residual add, LayerNorm, FC1 GEMM, GeLU, FC2 GEMM, TP all-reduce, residual add;
* per layer backward: the matching dgrad/wgrad GEMMs, with the TP all-reduce of a column-parallel
  input gradient launched asynchronously and overlapped with the weight-gradient GEMM (Megatron's
  ``LinearWithGradAccumulationAndAsyncCommunication``);
* stage 0 adds the vocabulary-parallel embedding (one TP all-reduce); the last stage adds the
  output layer and the vocabulary-parallel cross entropy (three small fp32 TP all-reduces);
* during the last microbatch's backward, each gradient bucket (``bucket_params``) is
  reduce-scattered over the data-parallel group as soon as its layers are done (overlapping the
  rest of the backward); the optimizer waits for them, computes the gradient norm (a
  device-to-host copy and a ``cudaStreamSynchronize``: the CPU blocks), runs Adam on its shard
  and all-gathers the updated parameters per bucket.

Layer ranges are ``user_annotation`` events named ``decoder.layers.<i>`` (forward, main thread)
and ``decoder.layers.<i>.backward`` (autograd thread) with the global layer index ``i``;
microbatches are ``forward_step#<mb>`` / ``backward_step#<mb>`` (0-based).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.synth.models import SynthConfig
from lumos_core.trace.model import CollectiveKind
from lumos_core.whatif.schedules import pipeline_steps

__all__ = ["CommDesc", "KernelDesc", "StagePlan", "build_stage_plan", "layer_annotation"]

# ---- instruction opcodes (first element of every instruction tuple) ----
OP_STEP_BEGIN = 0  # (op,)
OP_STEP_END = 1  # (op,)
OP_BEGIN = 2  # (op, thread, name, cat)       a CPU range (user_annotation or cpu_op) opens
OP_END = 3  # (op, thread)                    the innermost open range of the thread closes
OP_KERNEL = 4  # (op, thread, kernel_desc)      a cpu_op launching one kernel on the compute stream
OP_COLL = 5  # (op, thread, comm_desc, handle)  a collective; handle -1: wait at once (synchronous)
OP_P2P = 6  # (op, thread, (comm_desc, ...))    p2p transfers issued together, then all waited
OP_WAIT = 7  # (op, thread, (handle, ...))      compute stream waits for async collectives
OP_MEMCPY = 8  # (op, thread, nbytes)           device-to-host copy on the compute stream
OP_SYNC = 9  # (op, thread)                     cudaStreamSynchronize(compute): the CPU blocks
OP_HANDOFF = 10  # (op, from_thread, to_thread) to_thread continues after from_thread's work

THREAD_MAIN = 0
THREAD_AUTOGRAD = 1

# Communication roles; a rank's NCCL stream for role r is stream index r + 1 (0 is compute).
ROLE_TP = 0
ROLE_DP = 1
ROLE_PREV = 2
ROLE_NEXT = 3
N_STREAMS = 5

BF16 = ("BFloat16", 2)
FP32 = ("Float", 4)

_GEMM_NAMES = {
    # (compute capability major) -> cuBLAS kernel name pattern; {op} is tn (forward), nn, nt
    10: "sm100_xmma_gemm_bf16bf16_bf16f32_f32_{op}_n_tilesize256x128x64_cluster2x1x1_execute_segment_k_off_kernel__5x_cublas",
    9: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{op}_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    8: "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_{op}",
    7: "volta_h884gemm_256x128_ldg8_{op}",
}
_FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
    "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
_FLASH_BWD = (
    "void pytorch_flash::flash_bwd_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, "
    "false, false, false, false, true>(pytorch_flash::Flash_bwd_params)"
)
_LN_FWD = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, "
    "float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
    "c10::BFloat16*)"
)
_LN_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, "
    "float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
    "c10::BFloat16 const*, c10::BFloat16*, int)"
)


def _elementwise(functor: str, arity: int) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, {arity}ul> >"
        f"(int, {functor}, std::array<char*, {arity}ul>)"
    )


_ADD = _elementwise("at::native::CUDAFunctor_add<c10::BFloat16>", 3)
_GELU = _elementwise(
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const"
    "::{lambda(c10::BFloat16)#1}",
    2,
)
_GELU_BWD = _elementwise(
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}"
    "::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}",
    3,
)
_FILL = _elementwise("at::native::FillFunctor<c10::BFloat16>", 1)
_EXP_SUB = _elementwise(
    "at::native::(anonymous namespace)::exp_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const"
    "::{lambda(float)#1}",
    2,
)
_SOFTMAX_GRAD = _elementwise("at::native::binary_internal::MulFunctor<float>", 3)
_REDUCE_MAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::MaxOps<float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
    "at::native::MaxOps<float>, unsigned int, float, 4>)"
)
_REDUCE_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >"
    "(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor"
    "<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4>)"
)
_EMBED_FWD = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, "
    "2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
    "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, "
    "unsigned int>, int, int, unsigned int, unsigned int, long)"
)
_EMBED_BWD = (
    "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, "
    "long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)"
)
_ADAM = (
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, int, float, float, float, "
    "float, float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float>, "
    "int, float, float, float, float, float, float, adamMode_t, float)"
)
_L2NORM = (
    "void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float, 512, 8>, float*, float*, "
    "bool, int>(long, int volatile*, TensorListMetadata<1>, L2NormFunctor<float, 512, 8>, float*, float*, "
    "bool, int)"
)


@dataclass(slots=True)
class KernelDesc:
    """A cpu_op that launches one kernel on the compute stream, with its nominal times."""

    cpu_name: str
    kernel_name: str
    gpu_ns: int  # roofline duration before jitter
    cpu_ns: int  # the cpu_op's own time around the launch call, before jitter
    dims: list[list[int]] | None = None  # "Input Dims"
    types: list[str] | None = None  # "Input type"
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    registers: int = 32
    shared_memory: int = 0
    launch: str = "cudaLaunchKernel"


@dataclass(slots=True)
class CommDesc:
    """One collective or p2p transfer a stage issues; sizes per rank, NCCL-tests ``size_bytes``."""

    role: int
    kind: CollectiveKind
    coll_name: str  # "Collective name" as PyTorch records it
    annotation: str  # "nccl:all_reduce" ...
    in_nelems: int
    out_nelems: int
    dtype: str
    dtype_bytes: int
    reduce_op: str = "Sum"
    payload: str = ""  # p2p: "act" / "grad" and the microbatch, for labels

    @property
    def size_bytes(self) -> int:
        nel = self.out_nelems if self.kind == CollectiveKind.ALL_GATHER else self.in_nelems
        return nel * self.dtype_bytes


@dataclass
class StagePlan:
    """The instructions of one iteration of one pipeline stage (shared by its ranks)."""

    stage: int
    ops: list[tuple] = field(default_factory=list)
    kernels: list[KernelDesc] = field(default_factory=list)
    comms: list[CommDesc] = field(default_factory=list)
    n_handles: int = 0

    @property
    def n_kernels(self) -> int:
        """GPU activities per iteration (compute kernels, memcpys, NCCL kernels)."""
        n = 0
        for op in self.ops:
            code = op[0]
            if code in (OP_KERNEL, OP_COLL, OP_MEMCPY):
                n += 1
            elif code == OP_P2P:
                n += len(op[2])
        return n


def layer_annotation(layer: int, backward: bool = False) -> str:
    """Name of the ``user_annotation`` around a layer's forward or backward (global layer index)."""
    return f"decoder.layers.{layer}.backward" if backward else f"decoder.layers.{layer}"


def _ns(seconds: float) -> int:
    return max(1, round(seconds * 1e9))


class _Builder:
    """Appends instructions for one stage; one method per Megatron building block."""

    def __init__(self, cfg: SynthConfig, gpu: GpuProfile, stage: int) -> None:
        self.cfg = cfg
        self.gpu = gpu
        self.plan = StagePlan(stage)
        self.ops = self.plan.ops
        self.first = stage == 0
        self.last = stage == cfg.pp - 1
        m = cfg.model
        self.T = cfg.tokens
        self.h = m.hidden
        self.f_tp = m.ffn // cfg.tp
        self.v_tp = m.vocab // cfg.tp
        self.heads_tp = m.heads // cfg.tp
        self.a_tp = m.attn_dim // cfg.tp  # this rank's share of Q/K/V/attention-output width
        self.layers = range(stage * cfg.layers_per_stage, (stage + 1) * cfg.layers_per_stage)
        self.gemm_pattern = _GEMM_NAMES.get(gpu.compute_capability[0], _GEMM_NAMES[9])
        # Volta has no BF16: Megatron trains in FP16 there, so kernels and messages say Half.
        self.fp16 = gpu.compute_capability[0] < 8
        self._kernel_index: dict[tuple, int] = {}
        self._comm_index: dict[tuple, int] = {}
        self._buckets = self._gradient_buckets()

    # ---- descriptor tables (deduplicated: a 96-layer stage reuses one set) ----
    def _kernel(self, desc: KernelDesc) -> int:
        if self.fp16:
            desc.kernel_name = desc.kernel_name.replace("c10::BFloat16", "c10::Half").replace(
                "cutlass::bfloat16_t", "cutlass::half_t"
            )
            if desc.types:
                desc.types = [t.replace("c10::BFloat16", "c10::Half") for t in desc.types]
        key = (desc.cpu_name, desc.kernel_name, desc.gpu_ns, repr(desc.dims))
        idx = self._kernel_index.get(key)
        if idx is None:
            idx = self._kernel_index[key] = len(self.plan.kernels)
            self.plan.kernels.append(desc)
        return idx

    def _comm(self, desc: CommDesc) -> int:
        if self.fp16 and desc.dtype == "BFloat16":
            desc.dtype = "Half"
        key = (
            desc.role,
            desc.kind,
            desc.coll_name,
            desc.in_nelems,
            desc.out_nelems,
            desc.dtype,
            desc.reduce_op,
            desc.payload,
        )
        idx = self._comm_index.get(key)
        if idx is None:
            idx = self._comm_index[key] = len(self.plan.comms)
            self.plan.comms.append(desc)
        return idx

    def _handle(self) -> int:
        self.plan.n_handles += 1
        return self.plan.n_handles - 1

    # ---- instruction helpers ----
    def begin(self, thread: int, name: str, cat: str = "user_annotation") -> None:
        self.ops.append((OP_BEGIN, thread, name, cat))

    def end(self, thread: int) -> None:
        self.ops.append((OP_END, thread))

    def kernel(self, thread: int, desc: KernelDesc) -> None:
        self.ops.append((OP_KERNEL, thread, self._kernel(desc)))

    def gemm(self, thread: int, m: int, n: int, k: int, op: str = "tn") -> None:
        t = costs.gemm_time(m, n, k, self.gpu)
        self.kernel(
            thread,
            KernelDesc(
                "aten::mm",
                self.gemm_pattern.format(op=op),
                _ns(t),
                9_000,
                dims=[[m, k], [k, n]],
                types=["c10::BFloat16", "c10::BFloat16"],
                grid=(max(1, n // 256), max(1, m // 128), 1),
                block=(384, 1, 1),
                registers=168,
                shared_memory=213_000,
            ),
        )

    def elementwise(
        self,
        thread: int,
        cpu_name: str,
        kernel_name: str,
        n: int,
        reads: int = 1,
        writes: int = 1,
        dtype_bytes: int = 2,
        dims: list[list[int]] | None = None,
    ) -> None:
        t = costs.elementwise_time(n, self.gpu, reads=reads, writes=writes, dtype_bytes=dtype_bytes)
        self.kernel(
            thread,
            KernelDesc(
                cpu_name,
                kernel_name,
                _ns(t),
                6_000,
                dims=dims,
                grid=(max(1, min(n // 512, 65535)), 1, 1),
                block=(128, 1, 1),
                registers=26,
            ),
        )

    def tp_allreduce(
        self, thread: int, nelems: int, dtype: tuple[str, int] = BF16, op: str = "Sum", handle: int = -1
    ) -> None:
        if self.cfg.tp == 1:
            return
        desc = CommDesc(
            ROLE_TP,
            CollectiveKind.ALL_REDUCE,
            "allreduce",
            "nccl:all_reduce",
            nelems,
            nelems,
            dtype[0],
            dtype[1],
            reduce_op=op,
        )
        self.ops.append((OP_COLL, thread, self._comm(desc), handle))

    def wait(self, thread: int, handles: list[int]) -> None:
        if handles:
            self.ops.append((OP_WAIT, thread, tuple(handles)))

    # ---- model pieces ----
    def layer_forward(self, th: int, layer: int) -> None:
        T, h, f = self.T, self.h, self.f_tp
        cfg = self.cfg
        hd = cfg.model.head_dim
        self.begin(th, layer_annotation(layer))
        self.layernorm(th, T, h)
        self.gemm(th, T, 3 * self.a_tp, h)
        sdpa = costs.attention_time(cfg.micro_batch, self.heads_tp, cfg.model.seq, hd, self.gpu)
        qkv_dims = [cfg.micro_batch, self.heads_tp, cfg.model.seq, hd]
        self.kernel(
            th,
            KernelDesc(
                "aten::_scaled_dot_product_flash_attention",
                _FLASH_FWD,
                _ns(sdpa),
                22_000,
                dims=[qkv_dims, qkv_dims, qkv_dims],
                types=["c10::BFloat16"] * 3,
                grid=(max(1, cfg.model.seq // 128), cfg.micro_batch, self.heads_tp),
                block=(128, 1, 1),
                registers=255,
                shared_memory=49_152,
            ),
        )
        self.gemm(th, T, h, self.a_tp)
        self.tp_allreduce(th, T * h)
        self.elementwise(th, "aten::add", _ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.layernorm(th, T, h)
        self.gemm(th, T, f, h)
        self.elementwise(th, "aten::gelu", _GELU, T * f, dims=[[T, f]])
        self.gemm(th, T, h, f)
        self.tp_allreduce(th, T * h)
        self.elementwise(th, "aten::add", _ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.end(th)

    def layernorm(self, th: int, rows: int, h: int, backward: bool = False) -> None:
        if backward:
            self.begin(th, "autograd::engine::evaluate_function: NativeLayerNormBackward0", "cpu_op")
            self.elementwise(
                th,
                "aten::native_layer_norm_backward",
                _LN_BWD,
                rows * h,
                reads=3,
                writes=1,
                dims=[[rows, h], [rows, h]],
            )
            self.end(th)
        else:
            self.elementwise(
                th,
                "aten::native_layer_norm",
                _LN_FWD,
                rows * h,
                reads=1,
                writes=1,
                dims=[[rows, h], [h], [h]],
            )

    def linear_backward(self, th: int, n_in: int, n_out: int, column_parallel: bool) -> None:
        """dgrad and wgrad of Y = X W^T (X: T x n_in); a column-parallel layer all-reduces dX over TP
        asynchronously while the wgrad GEMM runs."""
        T = self.T
        self.begin(
            th,
            "autograd::engine::evaluate_function: LinearWithGradAccumulationAndAsyncCommunicationBackward",
            "cpu_op",
        )
        self.begin(th, "LinearWithGradAccumulationAndAsyncCommunicationBackward", "cpu_op")
        self.gemm(th, T, n_in, n_out, op="nn")
        handle = -1
        if column_parallel and self.cfg.tp > 1:
            handle = self._handle()
            self.tp_allreduce(th, T * self.h, handle=handle)
        self.gemm(th, n_out, n_in, T, op="nt")
        if handle >= 0:
            self.wait(th, [handle])
        self.end(th)
        self.end(th)

    def layer_backward(self, th: int, layer: int) -> None:
        T, h, f = self.T, self.h, self.f_tp
        cfg = self.cfg
        hd = cfg.model.head_dim
        self.begin(th, layer_annotation(layer, backward=True))
        self.elementwise(th, "aten::add_", _ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.linear_backward(th, f, h, column_parallel=False)  # FC2 (row parallel)
        self.begin(th, "autograd::engine::evaluate_function: GeluBackward0", "cpu_op")
        self.elementwise(th, "aten::gelu_backward", _GELU_BWD, T * f, reads=2, dims=[[T, f], [T, f]])
        self.end(th)
        self.linear_backward(th, h, f, column_parallel=True)  # FC1
        self.layernorm(th, T, h, backward=True)
        self.elementwise(th, "aten::add_", _ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.linear_backward(th, self.a_tp, h, column_parallel=False)  # attention projection
        sdpa = costs.attention_time(
            cfg.micro_batch, self.heads_tp, cfg.model.seq, hd, self.gpu, backward=True
        )
        d4 = [cfg.micro_batch, self.heads_tp, cfg.model.seq, hd]
        self.begin(
            th, "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", "cpu_op"
        )
        self.kernel(
            th,
            KernelDesc(
                "aten::_scaled_dot_product_flash_attention_backward",
                _FLASH_BWD,
                _ns(sdpa),
                25_000,
                dims=[d4, d4, d4, d4, d4, d4[:3]],
                types=["c10::BFloat16"] * 5 + ["float"],
                grid=(max(1, cfg.model.seq // 128), cfg.micro_batch, self.heads_tp),
                block=(256, 1, 1),
                registers=255,
                shared_memory=98_304,
            ),
        )
        self.end(th)
        self.linear_backward(th, h, 3 * self.a_tp, column_parallel=True)  # QKV
        self.layernorm(th, T, h, backward=True)
        self.end(th)

    def embedding_forward(self, th: int) -> None:
        T, h = self.T, self.h
        self.begin(th, "embedding")
        self.elementwise(th, "aten::embedding", _EMBED_FWD, T * h, dims=[[self.v_tp, h], [T]])
        self.elementwise(th, "aten::add", _ADD, T * h, reads=2, dims=[[T, h], [T, h]])  # + positions
        self.tp_allreduce(th, T * h)  # VocabParallelEmbedding sums the partial lookups
        self.end(th)

    def embedding_backward(self, th: int) -> None:
        T, h = self.T, self.h
        self.begin(th, "embedding.backward")
        self.begin(th, "autograd::engine::evaluate_function: EmbeddingBackward0", "cpu_op")
        self.elementwise(
            th, "aten::embedding_dense_backward", _EMBED_BWD, T * h, reads=2, writes=1, dims=[[T, h], [T]]
        )
        self.end(th)
        self.end(th)

    def output_forward(self, th: int) -> None:
        T, h, v = self.T, self.h, self.v_tp
        self.begin(th, "output_layer")
        self.layernorm(th, T, h)
        self.gemm(th, T, v, h)
        self.end(th)
        # Megatron's vocab-parallel cross entropy: max, sum of exp and target logit, each all-reduced.
        self.begin(th, "loss")
        self.kernel(
            th,
            KernelDesc(
                "aten::max",
                _REDUCE_MAX,
                _ns(costs.memory_time(T * v * 2, self.gpu)),
                7_000,
                dims=[[T, v]],
                types=["c10::BFloat16"],
                grid=(T, 1, 1),
                block=(512, 1, 1),
            ),
        )
        self.tp_allreduce(th, T, FP32, op="Max")
        self.elementwise(th, "aten::exp", _EXP_SUB, T * v, reads=1, writes=1, dtype_bytes=4, dims=[[T, v]])
        self.kernel(
            th,
            KernelDesc(
                "aten::sum",
                _REDUCE_SUM,
                _ns(costs.memory_time(T * v * 4, self.gpu)),
                7_000,
                dims=[[T, v]],
                types=["float"],
                grid=(T, 1, 1),
                block=(512, 1, 1),
            ),
        )
        self.tp_allreduce(th, T, FP32)
        self.tp_allreduce(th, T, FP32)  # predicted logits
        self.end(th)

    def output_backward(self, th: int) -> None:
        T, h, v = self.T, self.h, self.v_tp
        self.begin(th, "output_layer.backward")
        self.begin(th, "autograd::engine::evaluate_function: _VocabParallelCrossEntropyBackward", "cpu_op")
        self.elementwise(
            th, "aten::mul", _SOFTMAX_GRAD, T * v, reads=2, writes=1, dtype_bytes=4, dims=[[T, v]]
        )
        self.end(th)
        self.linear_backward(th, h, v, column_parallel=True)
        self.layernorm(th, T, h, backward=True)
        self.end(th)

    # ---- data parallelism ----
    def _param_groups(self) -> list[tuple[str, int]]:
        """(name, parameters on this rank) in the order backward produces their gradients."""
        cfg, m = self.cfg, self.cfg.model
        groups: list[tuple[str, int]] = []
        if self.last:
            groups.append(("output_layer", m.vocab * m.hidden // cfg.tp + 2 * m.hidden))
        # Column/row-parallel weights and column-parallel biases are split; row-parallel biases and
        # LayerNorms are replicated on every TP rank.
        per_layer = (
            (4 * m.hidden * m.attn_dim + 2 * m.hidden * m.ffn + 3 * m.attn_dim + m.ffn) // cfg.tp
            + 2 * m.hidden
            + 4 * m.hidden
        )
        groups.extend((f"layer{i}", per_layer) for i in reversed(self.layers))
        if self.first:
            groups.append(("embedding", m.vocab * m.hidden // cfg.tp + m.seq * m.hidden))
        return groups

    def _gradient_buckets(self) -> dict[str, int]:
        """Group name -> parameters of the bucket that closes after that group's backward.

        Megatron fills buckets in backward order until each holds ``bucket_params``; sizes are
        padded to a multiple of the data-parallel size so reduce-scatter shards are equal."""
        closes: dict[str, int] = {}
        acc = 0
        groups = self._param_groups()
        for i, (name, n) in enumerate(groups):
            acc += n
            if acc >= self.cfg.bucket_params or i == len(groups) - 1:
                dp = self.cfg.dp
                closes[name] = (acc + dp - 1) // dp * dp
                acc = 0
        return closes

    @property
    def rank_params(self) -> int:
        return sum(n for _, n in self._param_groups())

    def maybe_reduce_scatter(self, th: int, group: str, handles: list[int]) -> None:
        numel = self._buckets.get(group)
        if numel is None or self.cfg.dp == 1:
            return
        desc = CommDesc(
            ROLE_DP,
            CollectiveKind.REDUCE_SCATTER,
            "_reduce_scatter_base",
            "nccl:_reduce_scatter_base",
            numel,
            numel // self.cfg.dp,
            *BF16,
        )
        h = self._handle()
        handles.append(h)
        self.ops.append((OP_COLL, th, self._comm(desc), h))

    # ---- the step ----
    def forward(self, mb: int) -> None:
        th = THREAD_MAIN
        self.begin(th, f"forward_step#{mb}")
        if self.first:
            self.embedding_forward(th)
        for layer in self.layers:
            self.layer_forward(th, layer)
        if self.last:
            self.output_forward(th)
        self.end(th)

    def backward(self, mb: int, sync_grads: bool, rs_handles: list[int]) -> None:
        th = THREAD_AUTOGRAD
        self.ops.append((OP_HANDOFF, THREAD_MAIN, th))
        self.begin(th, f"backward_step#{mb}")
        if self.last:
            self.output_backward(th)
            if sync_grads:
                self.maybe_reduce_scatter(th, "output_layer", rs_handles)
        for layer in reversed(self.layers):
            self.layer_backward(th, layer)
            if sync_grads:
                self.maybe_reduce_scatter(th, f"layer{layer}", rs_handles)
        if self.first:
            self.embedding_backward(th)
            if sync_grads:
                self.maybe_reduce_scatter(th, "embedding", rs_handles)
        self.end(th)
        self.ops.append((OP_HANDOFF, th, THREAD_MAIN))

    def p2p(self, transfers: tuple) -> None:
        T, h = self.T, self.h
        descs = []
        for t in transfers:
            role = ROLE_PREV if t.peer == "prev" else ROLE_NEXT
            kind = CollectiveKind.SEND if t.op == "send" else CollectiveKind.RECV
            descs.append(
                self._comm(CommDesc(role, kind, t.op, f"nccl:{t.op}", T * h, T * h, *BF16, payload=t.payload))
            )
        self.ops.append((OP_P2P, THREAD_MAIN, tuple(descs)))

    def optimizer(self, rs_handles: list[int]) -> None:
        th = THREAD_MAIN
        cfg = self.cfg
        self.wait(th, rs_handles)  # finish_grad_sync
        shard = self.rank_params // cfg.dp
        self.begin(th, "Optimizer.step#DistributedOptimizer.step")
        t_norm = costs.memory_time(shard * 4, self.gpu)
        self.kernel(
            th,
            KernelDesc(
                "multi_tensor_l2norm",
                _L2NORM,
                _ns(t_norm),
                35_000,
                grid=(320, 1, 1),
                block=(512, 1, 1),
                registers=40,
            ),
        )
        self.ops.append((OP_MEMCPY, th, 4))  # grad_norm.item()
        self.ops.append((OP_SYNC, th))
        ag_handles: list[int] = []
        buckets = list(self._buckets.values())
        for numel in buckets:
            # Adam on the fp32 shard: read/write params, m, v (24 B), read the bf16 grad, write bf16 params.
            t_adam = costs.memory_time(numel // cfg.dp * 28, self.gpu)
            self.kernel(
                th,
                KernelDesc(
                    "multi_tensor_adam",
                    _ADAM,
                    _ns(t_adam),
                    40_000,
                    grid=(320, 1, 1),
                    block=(512, 1, 1),
                    registers=64,
                ),
            )
        if cfg.dp > 1:
            for numel in buckets:
                desc = CommDesc(
                    ROLE_DP,
                    CollectiveKind.ALL_GATHER,
                    "_allgather_base",
                    "nccl:_all_gather_base",
                    numel // cfg.dp,
                    numel,
                    *BF16,
                )
                h = self._handle()
                ag_handles.append(h)
                self.ops.append((OP_COLL, th, self._comm(desc), h))
        self.end(th)
        self.wait(th, ag_handles)

    def zero_grad(self) -> None:
        n = self.rank_params
        self.elementwise(THREAD_MAIN, "aten::zero_", _FILL, n, reads=0, writes=1, dims=[[n]])


def build_stage_plan(cfg: SynthConfig, gpu: GpuProfile, stage: int) -> StagePlan:
    """The instructions of one training iteration on pipeline ``stage``."""
    b = _Builder(cfg, gpu, stage)
    b.ops.append((OP_STEP_BEGIN,))
    b.zero_grad()
    steps = pipeline_steps(cfg.schedule, stage, cfg.pp, cfg.microbatches)
    last_backward = max(i for i, s in enumerate(steps) if s.phase == "B")
    rs_handles: list[int] = []
    for i, step in enumerate(steps):
        if step.phase == "F":
            b.forward(step.microbatch)
        elif step.phase == "B":
            b.backward(step.microbatch, sync_grads=i == last_backward, rs_handles=rs_handles)
        else:
            b.p2p(step.transfers)
    b.optimizer(rs_handles)
    b.ops.append((OP_STEP_END,))
    return b.plan
