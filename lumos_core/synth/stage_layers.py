"""The Megatron-LM building blocks of a stage's plan: a transformer layer forward and backward,
LayerNorm, the embedding and the output layer with its cross entropy."""

from __future__ import annotations

from lumos_core.perf import costs
from lumos_core.synth.kernel_names import (
    ADD,
    EMBED_BWD,
    EMBED_FWD,
    EXP_SUB,
    GELU,
    GELU_BWD,
    LN_BWD,
    LN_FWD,
    REDUCE_MAX,
    REDUCE_SUM,
    RMS_BWD,
    RMS_FWD,
    SOFTMAX_GRAD,
    SWIGLU,
    SWIGLU_BWD,
)
from lumos_core.synth.plan import FP32, OP_SYNC, KernelDesc, layer_annotation
from lumos_core.synth.stage_attention import write_attention_core
from lumos_core.synth.stage_writer import StageWriter, ns


class StageLayers:
    """The model pieces, written with a :class:`StageWriter`'s instructions into its plan."""

    def __init__(self, w: StageWriter) -> None:
        self.w = w

    def layer_forward(self, th: int, layer: int, name: str | None = None) -> None:
        """One transformer layer forward (``name``: the annotation, e.g. for a recomputation)."""
        T, Ts, h = self.w.T, self.w.T_sp, self.w.h
        self.w.begin(th, name or layer_annotation(layer))
        if self.w.cfg.layer_sync:  # the checkpoint boundary: the CPU waits for the GPU's queue to drain
            self.w.ops.append((OP_SYNC, th))
        self.layernorm(th, Ts, h)
        self.w.tp_input(th, T * h)
        self.w.gemm(th, T, self.w.qkv_tp, h)
        self.attention_core(th)
        self.w.gemm(th, T, h, self.w.a_tp)
        self.w.tp_output(th, T * h)
        self.w.elementwise(th, "aten::add", ADD, Ts * h, reads=2, dims=[[Ts, h], [Ts, h]])
        self.layernorm(th, Ts, h)
        self.w.tp_input(th, T * h)
        self.w.gemm(th, T, self.w.fin_tp, h)
        self.activation(th)
        self.w.gemm(th, T, h, self.w.f_tp)
        self.w.tp_output(th, T * h)
        self.w.elementwise(th, "aten::add", ADD, Ts * h, reads=2, dims=[[Ts, h], [Ts, h]])
        self.w.end(th)

    def activation(self, th: int, backward: bool = False) -> None:
        T, f = self.w.T, self.w.f_tp
        if self.w.cfg.model.gated_ffn:  # SwiGLU: silu(gate) * up
            if backward:
                self.w.elementwise(
                    th,
                    "aten::silu_mul_backward",
                    SWIGLU_BWD,
                    T * f,
                    reads=3,
                    writes=2,
                    dims=[[T, 2 * f], [T, f]],
                )
            else:
                self.w.elementwise(th, "aten::silu_mul", SWIGLU, T * f, reads=2, dims=[[T, 2 * f]])
        elif backward:
            self.w.elementwise(th, "aten::gelu_backward", GELU_BWD, T * f, reads=2, dims=[[T, f], [T, f]])
        else:
            self.w.elementwise(th, "aten::gelu", GELU, T * f, dims=[[T, f]])

    def attention_core(self, th: int, backward: bool = False) -> None:
        write_attention_core(self.w, th, backward)

    def layernorm(self, th: int, rows: int, h: int, backward: bool = False) -> None:
        if self.w.cfg.model.norm == "rmsnorm":
            name = "aten::rms_norm_backward" if backward else "aten::rms_norm"
            self.w.elementwise(
                th,
                name,
                RMS_BWD if backward else RMS_FWD,
                rows * h,
                reads=3 if backward else 1,
                writes=1,
                dims=[[rows, h], [h]],
            )
            return
        if backward:
            self.w.begin(th, "autograd::engine::evaluate_function: NativeLayerNormBackward0", "cpu_op")
            self.w.elementwise(
                th,
                "aten::native_layer_norm_backward",
                LN_BWD,
                rows * h,
                reads=3,
                writes=1,
                dims=[[rows, h], [rows, h]],
            )
            self.w.end(th)
        else:
            self.w.elementwise(
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
        (reduce-scatters it with sequence parallelism) asynchronously while the wgrad GEMM runs; a
        row-parallel one first all-gathers its output gradient under sequence parallelism."""
        T = self.w.T
        self.w.begin(
            th,
            "autograd::engine::evaluate_function: LinearWithGradAccumulationAndAsyncCommunicationBackward",
            "cpu_op",
        )
        self.w.begin(th, "LinearWithGradAccumulationAndAsyncCommunicationBackward", "cpu_op")
        if not column_parallel and self.w.cfg.sp:
            self.w.tp_exchange(th, T * self.w.h, gather=True)
        self.w.gemm(th, T, n_in, n_out, op="nn")
        handle = -1
        if column_parallel and self.w.cfg.tp > 1:
            handle = self.w.new_handle()
            if self.w.cfg.sp:
                self.w.tp_exchange(th, T * self.w.h, gather=False, handle=handle)
            else:
                self.w.tp_allreduce(th, T * self.w.h, handle=handle)
        self.w.gemm(th, n_out, n_in, T, op="nt")
        if handle >= 0:
            self.w.wait(th, [handle])
        self.w.end(th)
        self.w.end(th)

    def layer_backward(self, th: int, layer: int) -> None:
        Ts, h = self.w.T_sp, self.w.h
        cfg = self.w.cfg
        self.w.begin(th, layer_annotation(layer, backward=True))
        if cfg.layer_sync and cfg.recompute != "full":  # (full: the recomputed forward syncs)
            self.w.ops.append((OP_SYNC, th))
        # Activation recomputation: full re-runs the layer's forward (its TP collectives too) from
        # the stored input; selective re-runs only the attention core (Korthikanti et al. 2022).
        if cfg.recompute == "full":
            self.layer_forward(th, layer, name=f"recompute.decoder.layers.{layer}")
        elif cfg.recompute == "selective":
            self.w.begin(th, f"recompute.decoder.layers.{layer}.core_attention")
            self.attention_core(th)
            self.w.end(th)
        self.w.elementwise(th, "aten::add_", ADD, Ts * h, reads=2, dims=[[Ts, h], [Ts, h]])
        self.linear_backward(th, self.w.f_tp, h, column_parallel=False)  # FC2 (row parallel)
        grad_fn = "SiluMulBackward0" if cfg.model.gated_ffn else "GeluBackward0"
        self.w.begin(th, f"autograd::engine::evaluate_function: {grad_fn}", "cpu_op")
        self.activation(th, backward=True)
        self.w.end(th)
        self.linear_backward(th, h, self.w.fin_tp, column_parallel=True)  # FC1 (gate and up)
        self.layernorm(th, Ts, h, backward=True)
        self.w.elementwise(th, "aten::add_", ADD, Ts * h, reads=2, dims=[[Ts, h], [Ts, h]])
        self.linear_backward(th, self.w.a_tp, h, column_parallel=False)  # attention projection
        self.attention_core(th, backward=True)
        self.linear_backward(th, h, self.w.qkv_tp, column_parallel=True)  # QKV
        self.layernorm(th, Ts, h, backward=True)
        self.w.end(th)

    def embedding_forward(self, th: int) -> None:
        T, h = self.w.T, self.w.h
        self.w.begin(th, "embedding")
        self.w.elementwise(th, "aten::embedding", EMBED_FWD, T * h, dims=[[self.w.v_tp, h], [T]])
        if self.w.cfg.model.learned_positions:
            self.w.elementwise(th, "aten::add", ADD, T * h, reads=2, dims=[[T, h], [T, h]])  # + positions
        self.w.tp_output(th, T * h)  # VocabParallelEmbedding sums the partial lookups
        self.w.end(th)

    def embedding_backward(self, th: int) -> None:
        T, h = self.w.T, self.w.h
        self.w.begin(th, "embedding.backward")
        self.w.begin(th, "autograd::engine::evaluate_function: EmbeddingBackward0", "cpu_op")
        self.w.elementwise(
            th, "aten::embedding_dense_backward", EMBED_BWD, T * h, reads=2, writes=1, dims=[[T, h], [T]]
        )
        self.w.end(th)
        self.w.end(th)

    def output_forward(self, th: int) -> None:
        T, h, v = self.w.T, self.w.h, self.w.v_tp
        self.w.begin(th, "output_layer")
        self.layernorm(th, self.w.T_sp, h)
        self.w.tp_input(th, T * h)
        self.w.gemm(th, T, v, h)
        self.w.end(th)
        # Megatron's vocab-parallel cross entropy: max, sum of exp and target logit, each all-reduced.
        self.w.begin(th, "loss")
        self.w.kernel(
            th,
            KernelDesc(
                "aten::max",
                REDUCE_MAX,
                ns(costs.memory_time(T * v * 2, self.w.gpu)),
                7_000,
                dims=[[T, v]],
                types=["c10::BFloat16"],
                grid=(T, 1, 1),
                block=(512, 1, 1),
            ),
        )
        self.w.tp_allreduce(th, T, FP32, op="Max")
        self.w.elementwise(th, "aten::exp", EXP_SUB, T * v, reads=1, writes=1, dtype_bytes=4, dims=[[T, v]])
        self.w.kernel(
            th,
            KernelDesc(
                "aten::sum",
                REDUCE_SUM,
                ns(costs.memory_time(T * v * 4, self.w.gpu)),
                7_000,
                dims=[[T, v]],
                types=["float"],
                grid=(T, 1, 1),
                block=(512, 1, 1),
            ),
        )
        self.w.tp_allreduce(th, T, FP32)
        self.w.tp_allreduce(th, T, FP32)  # predicted logits
        self.w.end(th)

    def output_backward(self, th: int) -> None:
        T, h, v = self.w.T, self.w.h, self.w.v_tp
        self.w.begin(th, "output_layer.backward")
        self.w.begin(th, "autograd::engine::evaluate_function: _VocabParallelCrossEntropyBackward", "cpu_op")
        self.w.elementwise(
            th, "aten::mul", SOFTMAX_GRAD, T * v, reads=2, writes=1, dtype_bytes=4, dims=[[T, v]]
        )
        self.w.end(th)
        self.linear_backward(th, h, v, column_parallel=True)
        self.layernorm(th, self.w.T_sp, h, backward=True)
        self.w.end(th)
