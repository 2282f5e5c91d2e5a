"""FLOPs and memory of a training iteration, by formula (documented in docs/performance-model.md).
The FLOPs formula lives in :mod:`lumos_core.perf.flops` (the what-if headlines use it too) and is
re-exported here; its docstring states the formula (Narayanan et al. Eq. 3, generalised).

Memory per GPU of a pipeline stage (Korthikanti et al. 2022, Sec. 4; Megatron's distributed
optimizer): weights bf16 (2 B/param) + gradients fp32 (4 B) + Adam's fp32 master, m and v (12 B)
sharded over data parallelism; activations per layer and microbatch ``s b h (34 + 5 a s / h)``
bytes without parallelism, the 34 part divided by TP with sequence parallelism (else 10 + 24 / t),
the 5 a s / h scores term gone with flash attention or selective recomputation, only the layer
input (2 s b h / t_sp) kept under full recomputation; stage 0 of 1F1B holds min(p, m) microbatches
in flight, times 1 + (p - 1) / (p v) when interleaved.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumos_core.perf.flops import eq3_flops, iteration_flops, layer_forward_flops
from lumos_core.synth.models import SynthConfig

__all__ = ["MemoryEstimate", "eq3_flops", "iteration_flops", "layer_forward_flops", "stage_memory"]


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Peak bytes per GPU of one pipeline stage, by part."""

    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    def as_dict(self) -> dict[str, float]:
        gib = 2.0**30
        return {
            "stage": self.stage,
            "weights_gib": round(self.weights / gib, 3),
            "gradients_gib": round(self.gradients / gib, 3),
            "optimizer_gib": round(self.optimizer / gib, 3),
            "activations_gib": round(self.activations / gib, 3),
            "total_gib": round(self.total / gib, 3),
        }


def _layer_activation_bytes(cfg: SynthConfig) -> float:
    m = cfg.model
    s, b, h, t = m.seq / cfg.cp, cfg.micro_batch, m.hidden, cfg.tp
    sp = cfg.sp and t > 1
    if cfg.recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    # Korthikanti's 34 sbh assumes a 4h MLP; scale the MLP's share (19 of 34) with the real width.
    linear = 15.0 + 19.0 * m.ffn_in_dim / (4.0 * h) * (0.5 + 0.5 * (1 if not m.gated_ffn else 0.75))
    scores = 0.0 if (cfg.attention == "flash" or cfg.recompute == "selective") else 5.0 * m.heads * s / h
    per = (linear / t if sp else 10.0 + (linear - 10.0) / t) + scores / t
    return s * b * h * per


def stage_memory(cfg: SynthConfig, stage: int, params_on_rank: int) -> MemoryEstimate:
    """Peak memory of one GPU of ``stage`` holding ``params_on_rank`` parameters."""
    m = cfg.model
    p, v = cfg.pp, cfg.vp
    in_flight = min(p - stage, cfg.microbatches) if p > 1 else 1
    if v > 1:
        in_flight *= 1.0 + (p - 1) / (p * v)
    layers = m.layers // p
    act = layers * in_flight * _layer_activation_bytes(cfg)
    if cfg.recompute == "full":  # one layer's full activations while it is recomputed
        act += _layer_activation_bytes(_no_recompute(cfg))
    if stage == p - 1:  # fp32 logits of the vocabulary-parallel cross entropy
        act += 4.0 * cfg.tokens * m.vocab / cfg.tp
    return MemoryEstimate(
        stage=stage,
        weights=2.0 * params_on_rank,
        gradients=4.0 * params_on_rank,
        optimizer=12.0 * params_on_rank / cfg.dp_cp,  # the distributed optimizer shards over DP x CP
        activations=act,
    )


def _no_recompute(cfg: SynthConfig) -> SynthConfig:
    from dataclasses import replace

    return replace(cfg, recompute="none")
