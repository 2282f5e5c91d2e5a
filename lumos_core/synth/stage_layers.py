"""The Megatron-LM building blocks of a stage's plan: a transformer layer forward and backward,
LayerNorm, the embedding and the output layer with its cross entropy."""

from __future__ import annotations

from lumos_core.perf import costs
from lumos_core.synth.kernel_names import (
    ADD,
    EMBED_BWD,
    EMBED_FWD,
    EXP_SUB,
    FLASH_BWD,
    FLASH_FWD,
    GELU,
    GELU_BWD,
    LN_BWD,
    LN_FWD,
    REDUCE_MAX,
    REDUCE_SUM,
    SOFTMAX_GRAD,
)
from lumos_core.synth.plan import FP32, KernelDesc, layer_annotation
from lumos_core.synth.stage_writer import StageWriter, ns


class StageLayers(StageWriter):
    """The model pieces, written with :class:`StageWriter`'s instructions."""

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
                FLASH_FWD,
                ns(sdpa),
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
        self.elementwise(th, "aten::add", ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.layernorm(th, T, h)
        self.gemm(th, T, f, h)
        self.elementwise(th, "aten::gelu", GELU, T * f, dims=[[T, f]])
        self.gemm(th, T, h, f)
        self.tp_allreduce(th, T * h)
        self.elementwise(th, "aten::add", ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.end(th)

    def layernorm(self, th: int, rows: int, h: int, backward: bool = False) -> None:
        if backward:
            self.begin(th, "autograd::engine::evaluate_function: NativeLayerNormBackward0", "cpu_op")
            self.elementwise(
                th,
                "aten::native_layer_norm_backward",
                LN_BWD,
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
                LN_FWD,
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
        self.elementwise(th, "aten::add_", ADD, T * h, reads=2, dims=[[T, h], [T, h]])
        self.linear_backward(th, f, h, column_parallel=False)  # FC2 (row parallel)
        self.begin(th, "autograd::engine::evaluate_function: GeluBackward0", "cpu_op")
        self.elementwise(th, "aten::gelu_backward", GELU_BWD, T * f, reads=2, dims=[[T, f], [T, f]])
        self.end(th)
        self.linear_backward(th, h, f, column_parallel=True)  # FC1
        self.layernorm(th, T, h, backward=True)
        self.elementwise(th, "aten::add_", ADD, T * h, reads=2, dims=[[T, h], [T, h]])
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
                FLASH_BWD,
                ns(sdpa),
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
        self.elementwise(th, "aten::embedding", EMBED_FWD, T * h, dims=[[self.v_tp, h], [T]])
        self.elementwise(th, "aten::add", ADD, T * h, reads=2, dims=[[T, h], [T, h]])  # + positions
        self.tp_allreduce(th, T * h)  # VocabParallelEmbedding sums the partial lookups
        self.end(th)

    def embedding_backward(self, th: int) -> None:
        T, h = self.T, self.h
        self.begin(th, "embedding.backward")
        self.begin(th, "autograd::engine::evaluate_function: EmbeddingBackward0", "cpu_op")
        self.elementwise(
            th, "aten::embedding_dense_backward", EMBED_BWD, T * h, reads=2, writes=1, dims=[[T, h], [T]]
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
                REDUCE_MAX,
                ns(costs.memory_time(T * v * 2, self.gpu)),
                7_000,
                dims=[[T, v]],
                types=["c10::BFloat16"],
                grid=(T, 1, 1),
                block=(512, 1, 1),
            ),
        )
        self.tp_allreduce(th, T, FP32, op="Max")
        self.elementwise(th, "aten::exp", EXP_SUB, T * v, reads=1, writes=1, dtype_bytes=4, dims=[[T, v]])
        self.kernel(
            th,
            KernelDesc(
                "aten::sum",
                REDUCE_SUM,
                ns(costs.memory_time(T * v * 4, self.gpu)),
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
            th, "aten::mul", SOFTMAX_GRAD, T * v, reads=2, writes=1, dtype_bytes=4, dims=[[T, v]]
        )
        self.end(th)
        self.linear_backward(th, h, v, column_parallel=True)
        self.layernorm(th, T, h, backward=True)
        self.end(th)
