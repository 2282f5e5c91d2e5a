"""The attention core of a layer in a stage's plan: one flash-attention kernel (with context
parallelism, the local queries against all keys and the K/V exchange over the CP group) or
Megatron's unfused batched GEMMs around a fused scale-mask-softmax and dropout."""

from __future__ import annotations

from lumos_core.perf import costs
from lumos_core.synth.kernel_names import BMM, DROPOUT, FLASH_BWD, FLASH_FWD, SOFTMAX_BWD, SOFTMAX_FWD
from lumos_core.synth.plan import BF16, ROLE_CP, CommDesc, KernelDesc
from lumos_core.synth.stage_writer import StageWriter, ns
from lumos_core.trace.model import CollectiveKind

__all__ = ["write_attention_core"]


def write_attention_core(w: StageWriter, th: int, backward: bool = False) -> None:
    """softmax(QK^T)V on this rank's heads: one flash kernel (causal blocks skipped; with
    context parallelism the local queries attend to the whole sequence), or Megatron's unfused
    batched GEMMs around a fused scale-mask-softmax and dropout (full s x s scores)."""
    cfg = w.cfg
    b, hq, s, d = cfg.micro_batch, w.heads_tp, cfg.model.seq, cfg.model.head_dim
    if cfg.attention == "unfused":
        _unfused_attention(w, th, b * hq, s, d, backward)
        return
    sq = s // cfg.cp
    t = costs.attention_time(b, hq, sq, d, w.gpu, backward=backward)
    if cfg.cp > 1:  # s/cp local queries against all s keys: cp x the FLOPs of an s/cp square
        t *= cfg.cp
        _cp_exchange(w, th, backward)
    d4 = [b, hq, sq, d]
    if backward:
        w.begin(th, "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", "cpu_op")
        w.kernel(
            th,
            KernelDesc(
                "aten::_scaled_dot_product_flash_attention_backward",
                FLASH_BWD,
                ns(t),
                25_000,
                dims=[d4, d4, d4, d4, d4, d4[:3]],
                types=["c10::BFloat16"] * 5 + ["float"],
                grid=(max(1, sq // 128), b, hq),
                block=(256, 1, 1),
                registers=255,
                shared_memory=98_304,
            ),
        )
        w.end(th)
        return
    w.kernel(
        th,
        KernelDesc(
            "aten::_scaled_dot_product_flash_attention",
            FLASH_FWD,
            ns(t),
            22_000,
            dims=[d4, d4, d4],
            types=["c10::BFloat16"] * 3,
            grid=(max(1, sq // 128), b, hq),
            block=(128, 1, 1),
            registers=255,
            shared_memory=49_152,
        ),
    )


def _bmm(w: StageWriter, th: int, batch: int, m: int, n: int, k: int) -> None:
    """A batched GEMM (``batch`` products of m x k by k x n in one kernel: tiles of every product
    share the waves)."""
    t = costs.gemm_time(m, n, k, w.gpu, batch=batch)
    w.kernel(
        th,
        KernelDesc(
            "aten::bmm",
            BMM.format(op="tn"),
            ns(t),
            9_000,
            dims=[[batch, m, k], [batch, k, n]],
            types=["c10::BFloat16"] * 2,
            grid=(max(1, n // 128), max(1, m // 128), batch),
            block=(256, 1, 1),
        ),
    )


def _cp_exchange(w: StageWriter, th: int, backward: bool) -> None:
    """Context parallelism: the ring passes K and V blocks around the CP group (forward), and
    their gradients back (backward); costed as one all-gather of this rank's K and V."""
    kv = 2 * w.T * w.cfg.model.kv_dim // w.cfg.tp
    n = kv * w.cfg.cp
    kind = CollectiveKind.REDUCE_SCATTER if backward else CollectiveKind.ALL_GATHER
    desc = CommDesc(
        ROLE_CP, kind, "cp_ring", "nccl:cp_ring", n if backward else kv, kv if backward else n, *BF16
    )
    w.collective(th, desc)


def _unfused_attention(w: StageWriter, th: int, bh: int, s: int, d: int, backward: bool) -> None:
    scores = bh * s * s
    if not backward:
        _bmm(w, th, bh, s, s, d)  # QK^T
        w.kernel(
            th,
            KernelDesc(
                "ScaledUpperTriangMaskedSoftmax",
                SOFTMAX_FWD,
                ns(costs.memory_time(scores * 4, w.gpu)),
                6_000,
                dims=[[bh, s, s]],
            ),
        )
        w.elementwise(th, "aten::native_dropout", DROPOUT, scores, reads=1, writes=2, dims=[[bh, s, s]])
        _bmm(w, th, bh, s, d, s)  # PV
        return
    w.begin(th, "autograd::engine::evaluate_function: CoreAttentionBackward", "cpu_op")
    _bmm(w, th, bh, s, s, d)  # dP = dO V^T
    _bmm(w, th, bh, d, s, s)  # dV = P^T dO
    w.elementwise(th, "aten::native_dropout_backward", DROPOUT, scores, reads=2, writes=1, dims=[[bh, s, s]])
    w.kernel(
        th,
        KernelDesc(
            "ScaledUpperTriangMaskedSoftmaxBackward",
            SOFTMAX_BWD,
            ns(costs.memory_time(scores * 6, w.gpu)),
            6_000,
            dims=[[bh, s, s]],
        ),
    )
    _bmm(w, th, bh, s, d, s)  # dQ = dS K
    _bmm(w, th, bh, s, d, s)  # dK = dS^T Q
    w.end(th)
