"""FLOPs of a training iteration, by formula (documented in docs/performance-model.md).

FLOPs follow Narayanan et al. (SC'21, Eq. 3) generalised to GQA and SwiGLU: a layer's forward is
``2 * tokens * (h * qkv + a * h + h * f_in + f * h)`` for its GEMMs plus ``4 * tokens * s * a`` for
QK^T and PV (the full s x s product, as Eq. 3 counts it), the LM head ``2 * tokens * h * V``; the
backward is twice the forward. *Model* FLOPs (MFU) count forward + backward once; *hardware*
FLOPs (HFU) add what recomputation re-runs (full: the layer forwards again, Eq. 3's factor 4/3;
selective: the attention core). For GPT-3 shapes this is exactly Eq. 3:
``96 B s l h^2 (1 + s / 6h + V / 16 l h)`` with recomputation counted.

It sits in perf (below synth and whatif) so that both the synthetic generator and the what-if
headlines (model FLOPs utilisation) use the one formula. The memory formulas stay with synth.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ModelShape", "eq3_flops", "iteration_flops", "layer_forward_flops"]


class ModelShape(Protocol):
    """What the formula reads of a model (``synth.models.ModelSpec`` is one)."""

    @property
    def layers(self) -> int: ...
    @property
    def hidden(self) -> int: ...
    @property
    def ffn(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def vocab(self) -> int: ...
    @property
    def attn_dim(self) -> int: ...
    @property
    def qkv_dim(self) -> int: ...
    @property
    def ffn_in_dim(self) -> int: ...


def layer_forward_flops(m: ModelShape, tokens: float) -> tuple[float, float]:
    """(GEMM FLOPs, attention-core FLOPs) of one layer's forward over ``tokens`` tokens."""
    gemm = 2.0 * tokens * (m.hidden * m.qkv_dim + m.attn_dim * m.hidden + m.hidden * m.ffn_in_dim + m.ffn * m.hidden)
    attn = 4.0 * tokens * m.seq * m.attn_dim
    return gemm, attn


def iteration_flops(m: ModelShape, global_batch: int, recompute: str = "none") -> float:
    """FLOPs of one iteration over ``global_batch`` sequences; recomputation adds its re-run forward."""
    tokens = float(global_batch) * m.seq
    gemm, attn = layer_forward_flops(m, tokens)
    head = 2.0 * tokens * m.hidden * m.vocab
    flops = 3.0 * (m.layers * (gemm + attn) + head)
    if recompute == "full":
        flops += m.layers * (gemm + attn)
    elif recompute == "selective":
        flops += m.layers * attn
    return flops


def eq3_flops(m: ModelShape, global_batch: int) -> float:
    """Narayanan et al.'s Eq. 3 (full recomputation counted), the FLOPs of their published TFLOP/s."""
    return iteration_flops(m, global_batch, "full")
