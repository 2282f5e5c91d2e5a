"""The attention core of a layer in a stage's plan: one flash-attention kernel, Megatron's unfused
batched GEMMs around a fused scale-mask-softmax and dropout, or, with context parallelism, ring
attention over the CP group.

Context parallelism is written as Megatron-Core's default ``cp_comm_type="p2p"`` runs it
(TransformerEngine's ``AttnFuncWithCPAndKVP2P``): each rank holds seq / cp tokens (two chunks of
2 cp, so that causal work is balanced) and computes its queries against the K/V block of every CP
rank in turn. Forward: cp partial flash kernels; before each of the first cp - 1 the rank sends
the K/V block it holds to the next CP rank and receives the next block from the previous one
(batched isend/irecv on their own NCCL streams), so the transfer overlaps the partial kernel and
the next kernel waits for it. Backward: cp partial flash-backward kernels, each overlapped with one
ring transfer: K/V first, then K/V with the dK/dV accumulators travelling along, last dK/dV alone
back toward its owner. (The alternatives, ``a2a`` and ``allgather``, are not modelled.)
"""

from __future__ import annotations

from collections.abc import Callable

from lumos_core.perf import costs
from lumos_core.synth.kernel_names import BMM, DROPOUT, FLASH_BWD, FLASH_FWD, SOFTMAX_BWD, SOFTMAX_FWD
from lumos_core.synth.plan import BF16, ROLE_CP, ROLE_CP_RECV, CommDesc, KernelDesc
from lumos_core.synth.stage_writer import StageWriter, ns
from lumos_core.trace.model import CollectiveKind

__all__ = ["write_attention_core"]

# One ring step: send to the next CP rank, receive from the previous one.
_RING = ((ROLE_CP, CollectiveKind.SEND, "send"), (ROLE_CP_RECV, CollectiveKind.RECV, "recv"))


def write_attention_core(w: StageWriter, th: int, backward: bool = False) -> None:
    """softmax(QK^T)V on this rank's heads: one flash kernel (causal blocks skipped), ring attention
    over the CP group with context parallelism, or Megatron's unfused batched GEMMs around a fused
    scale-mask-softmax and dropout (full s x s scores)."""
    cfg = w.cfg
    b, hq, s, d = cfg.micro_batch, w.heads_tp, cfg.model.seq, cfg.model.head_dim
    if cfg.attention == "unfused":
        _unfused_attention(w, th, b * hq, s, d, backward)
        return
    sq = s // cfg.cp
    # One causal sq x sq block: the whole kernel without CP; with CP each of the cp ring steps
    # (the load-balanced diagonal block, or half of the two chunks against a remote block)
    t = costs.attention_time(b, hq, sq, d, w.gpu, backward=backward)
    if cfg.cp > 1:
        _ring_attention(w, th, backward, lambda: _flash_kernel(b, hq, sq, d, t, backward))
        return
    if backward:
        w.begin(th, "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", "cpu_op")
        w.kernel(th, _flash_kernel(b, hq, sq, d, t, backward))
        w.end(th)
        return
    w.kernel(th, _flash_kernel(b, hq, sq, d, t, backward))


def _flash_kernel(b: int, hq: int, sq: int, d: int, t: float, backward: bool) -> KernelDesc:
    d4 = [b, hq, sq, d]
    if backward:
        return KernelDesc(
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
        )
    return KernelDesc(
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
    )


def _ring_attention(w: StageWriter, th: int, backward: bool, kernel: Callable[[], KernelDesc]) -> None:
    """cp partial flash kernels, each overlapped with one K/V (or dK/dV) transfer around the CP
    ring that the next kernel waits for (see the module docstring)."""
    cp = w.cfg.cp
    kv = 2 * w.T * w.cfg.model.kv_dim // w.cfg.tp  # this rank's K and V (GQA: the KV heads only)
    if backward:
        w.begin(th, "autograd::engine::evaluate_function: AttnFuncWithCPAndKVP2PBackward", "cpu_op")
        sizes = [(kv, "kv")] + [(2 * kv, "kv+dkv")] * (cp - 2) + [(kv, "dkv")]
    else:
        w.begin(th, "AttnFuncWithCPAndKVP2P", "cpu_op")
        sizes = [(kv, "kv")] * (cp - 1)
    for step in range(cp):
        handles = []
        if step < len(sizes):
            n, payload = sizes[step]
            for role, kind, op in _RING:
                h = w.new_handle()
                handles.append(h)
                w.collective(th, CommDesc(role, kind, op, f"nccl:{op}", n, n, *BF16, payload=payload), h)
        w.kernel(th, kernel())  # a fresh descriptor: the writer scales its host time in place
        w.wait(th, handles)
    w.end(th)


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
