"""Per-rank memory of a training configuration: weights, gradients, optimizer states, activations.

The model (bytes per pipeline stage; every rank of a stage holds the same):

* **Parameters** of the stage's layers (QKV, projection, MLP, two LayerNorms) split over TP, plus
  the input embeddings and learned positions on the first stage and the LM head and final
  LayerNorm on the last (untied, as our CPU model; Megatron ties them but keeps a copy per end
  stage when PP > 1, so the count is the same there).
* **Bytes per parameter** by precision. ``bf16`` (mixed precision as Megatron-LM runs it): bf16
  weights (2), fp32 gradient accumulation (4), Adam's fp32 master weights and two moments (12).
  ``fp32``: weights 4, gradients 4, Adam moments 8. A distributed optimizer / ZeRO stage divides by
  DP: stage 1 the optimizer states, 2 also the gradients, 3 also the weights.
* **Activations** after Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models", Sec. 4, no sequence parallelism): per layer and microbatch, in 16-bit
  units, ``sbh(10 + 24/t) + 5as²b/t`` bytes. The terms are kept apart so that fp32 doubles the
  tensors but not the 1-byte dropout masks, a model without dropout has no masks, a fused
  (flash/SDPA) attention keeps no s² scores, and an FFN width other than 4h scales the MLP.
  Recomputation: ``selective`` drops the s² scores (recomputed), ``full`` keeps only each layer's
  input (2sbh) plus one layer's full set while it is recomputed. The last stage also holds the
  logits and their softmax (``2 x element`` bytes per s·b·vocab/t, Korthikanti's 4sbv/t in bf16).
* **Microbatches in flight** come from the pipeline schedule itself (:func:`in_flight`): 1F1B keeps
  up to ``stages - stage`` forward passes before their backward; GPipe keeps all of them.
* **Other**: a per-rank constant for workspaces, temporaries and the allocator's fragmentation,
  calibrated from the trace's measured peak where it has memory records
  (:mod:`lumos_core.whatif.memory_calibration`), else the stated margin :data:`MARGIN_FRACTION` of
  the modelled bytes plus :data:`MARGIN_BYTES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lumos_core.perf.schedules import interleaved_order, schedule
from lumos_core.whatif.config import JobConfig

__all__ = [
    "MARGIN_BYTES",
    "MARGIN_FRACTION",
    "RECOMPUTE",
    "MemoryParts",
    "MemoryPrediction",
    "ModelTraits",
    "StageMemory",
    "in_flight",
    "layer_activation_bytes",
    "predict_memory",
    "stage_parts",
]

RECOMPUTE = ("none", "selective", "full")
# Without memory records: workspaces (cuBLAS, NCCL buffers), the CUDA context and fragmentation,
# as 10 % of the modelled bytes plus 1 GiB per GPU. A stated margin, not a measurement.
MARGIN_FRACTION = 0.10
MARGIN_BYTES = 1 << 30

_BYTES_PER_PARAM = {  # (weights, gradients, optimizer states) per parameter
    "bf16": (2, 4, 12),
    "fp32": (4, 4, 8),
}


@dataclass(frozen=True)
class ModelTraits:
    """What the memory model needs beyond :class:`JobConfig`, usually read from the trace."""

    precision: str = "bf16"  # "bf16" (mixed precision) or "fp32"
    vocab: int | None = None  # None: embeddings and logits are left out (and a note says so)
    dropout: bool = True  # 1-byte dropout masks are kept for backward
    fused_attention: bool = False  # flash / SDPA kernels: no s x s scores are kept
    how: dict[str, str] = field(default_factory=dict)  # trait -> how it was found

    @property
    def element_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2


@dataclass
class MemoryParts:
    params: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    other: int = 0

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations + self.other

    @property
    def modelled(self) -> int:
        """Everything but the calibrated constant."""
        return self.total - self.other

    def as_dict(self) -> dict[str, int]:
        return {
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "other": self.other,
        }


@dataclass
class StageMemory:
    stage: int
    ranks: tuple[int, int]  # first and last global rank of the stage (Megatron order)
    in_flight: int  # microbatches whose activations are held at the peak
    parts: MemoryParts

    @property
    def peak_bytes(self) -> int:
        return self.parts.total


@dataclass
class MemoryPrediction:
    """Predicted peak memory per pipeline stage (all ranks of a stage hold the same)."""

    gpu: str
    capacity_bytes: int
    stages: list[StageMemory]
    calibration: str  # how "other" was set
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.peak_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.peak.peak_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "parts": self.peak.parts.as_dict(),
            "gpu": self.gpu,
            "peak_stage": self.peak.stage,
            "stages": [
                {
                    "stage": s.stage,
                    "ranks": list(s.ranks),
                    "in_flight_microbatches": s.in_flight,
                    "peak_bytes": s.peak_bytes,
                    "fits": s.peak_bytes <= self.capacity_bytes,
                    "parts": s.parts.as_dict(),
                }
                for s in self.stages
            ],
            "calibration": self.calibration,
            "notes": self.notes,
        }


def in_flight(kind: str, stage: int, stages: int, microbatches: int, vp: int = 1) -> float:
    """Most forward passes of ``stage`` whose backward has not run yet, from the schedule's order;
    interleaved (``vp`` > 1): model chunks in flight / vp, each chunk holding 1/vp of the layers
    (Korthikanti's p (1 + (p-1)/(p v)) on the first stage)."""
    held = most = 0
    if vp > 1:
        for phase, _, _ in interleaved_order(stage, stages, vp, microbatches):
            held += 1 if phase == "F" else -1
            most = max(most, held)
        return max(most / vp, 1.0)
    for phase, _ in schedule(kind, stage, stages, microbatches):
        held += 1 if phase == "F" else -1
        most = max(most, held)
    return max(most, 1)


def _dims(cfg: JobConfig) -> tuple[int, int, int, int, int]:
    missing = [k for k in ("layers", "hidden", "seq", "micro_batch") if getattr(cfg, k) is None]
    if missing:
        raise ValueError(f"memory model needs {', '.join(missing)}")
    h = int(cfg.hidden)  # type: ignore[arg-type]
    return int(cfg.seq) // cfg.cp, int(cfg.micro_batch), h, int(cfg.heads or max(1, h // 64)), int(cfg.ffn or 4 * h)  # type: ignore[arg-type]


def layer_activation_bytes(cfg: JobConfig, traits: ModelTraits, recompute: str = "none") -> int:
    """Bytes one transformer layer keeps for backward per microbatch (Korthikanti et al., Sec. 4)."""
    s, b, h, a, f = _dims(cfg)
    t = cfg.tp
    e2 = traits.element_bytes / 2  # tensors are counted in 16-bit units by the paper
    sbh, sbf = s * b * h, s * b * f
    sp = cfg.sp and t > 1  # sequence parallelism shards the replicated part over TP too
    if recompute == "full":
        return int(2 * sbh * e2 / (t if sp else 1))  # the layer's input only
    # LayerNorm inputs (4), attention input (2) and MLP input (2) are replicated across TP ranks;
    # Q, K (4), V (2), projection input (2) and the two MLP activations (2 x 2f/h) are split.
    replicated = 8 * sbh * e2 + (2 * sbh if traits.dropout else 0)
    if sp:
        replicated /= t
    kv = _kv_fraction(cfg)
    if cfg.mlp == "swiglu":
        sbf = sbf * 3 // 2  # gate and up outputs (2 x 2f) and the activation (f) for 2 x 2f of GeLU
    if kv == 1.0:
        split = (8 * sbh + 4 * sbf) * e2 / t
    else:  # grouped-query attention: K and V have KV heads, Q and the projection input all heads
        split = ((4 + 4 * kv) * sbh + 4 * sbf) * e2 / t
    scores = 0.0
    if not traits.fused_attention and recompute == "none":
        # softmax output (2), its dropout mask (1) and the dropout output (2) per a·s²·b / t
        scores = a * s * s * b / t * (2 * e2 + ((1 + 2 * e2) if traits.dropout else 0))
    return int(replicated + split + scores)


def _kv_fraction(cfg: JobConfig) -> float:
    """KV heads / heads (1 for multi-head attention or when unknown)."""
    a, kv = cfg.heads, cfg.kv_heads
    return kv / a if a and kv and kv != a else 1.0


def _layer_params(h: int, f: int, kv: float = 1.0) -> int:
    # QKV (3h² + 3h; with GQA h(h + 2 kv h) + h + 2 kv h), projection (h² + h), MLP (2hf + f + h),
    # two LayerNorms (4h)
    if kv != 1.0:
        q = int(h + 2 * kv * h)
        return h * q + q + h * h + h + 2 * h * f + f + h + 4 * h
    return 4 * h * h + 3 * h + h + 2 * h * f + f + h + 4 * h


def stage_parts(cfg: JobConfig, traits: ModelTraits, stage: int) -> tuple[MemoryParts, int]:
    """Modelled bytes of one pipeline stage (``other`` = 0) and its microbatches in flight."""
    s, b, h, _, f = _dims(cfg)
    t, pp, dp = cfg.tp, cfg.pp, cfg.dp
    layers = int(cfg.layers) // pp  # type: ignore[arg-type]
    first, last = stage == 0, stage == pp - 1
    vocab = traits.vocab or 0
    params = layers * _layer_params(h, f, _kv_fraction(cfg)) / t
    if cfg.mlp == "swiglu":
        params += layers * h * f / t  # the gate projection
    if first:
        params += vocab * h / t + s * h
    if last:
        params += vocab * h / t + 2 * h
    w, g, o = _BYTES_PER_PARAM.get(traits.precision, _BYTES_PER_PARAM["bf16"])
    zero = cfg.zero
    parts = MemoryParts(
        params=int(params * w / (dp if zero >= 3 else 1)),
        grads=int(params * g / (dp if zero >= 2 else 1)),
        optimizer=int(params * o / (dp if zero >= 1 else 1)),
    )
    held = in_flight(cfg.schedule, stage, pp, cfg.microbatches, cfg.vp)
    per_mb = layers * layer_activation_bytes(cfg, traits, cfg.recompute)
    if first and traits.dropout:
        per_mb += s * b * h  # embedding dropout mask
    if last:
        per_mb += int(s * b * vocab / t * 2 * traits.element_bytes)  # logits and their softmax
    acts = held * per_mb
    if cfg.recompute == "full" and layers:
        acts += layer_activation_bytes(cfg, traits, "none")  # one layer recomputed at a time
    parts.activations = int(acts)
    return parts, held


def predict_memory(
    cfg: JobConfig, traits: ModelTraits, other: int | None = None, calibration: str = ""
) -> MemoryPrediction:
    """Peak memory per stage of ``cfg``. ``other``: the calibrated constant (None: the margin)."""
    gpu = cfg.gpu_profile
    stages = []
    per_stage = cfg.tp * cfg.dp
    for st in range(cfg.pp):
        parts, held = stage_parts(cfg, traits, st)
        if other is None:
            parts.other = int(MARGIN_FRACTION * parts.modelled) + MARGIN_BYTES
        else:
            parts.other = int(other)
        stages.append(StageMemory(st, (st * per_stage, (st + 1) * per_stage - 1), held, parts))
    notes = []
    if not traits.vocab:
        notes.append("vocabulary size unknown: embeddings, LM head and logits are not counted")
    return MemoryPrediction(
        gpu=gpu.name,
        capacity_bytes=gpu.memory_bytes,
        stages=stages,
        calibration=calibration
        or f"no memory records: other = {MARGIN_FRACTION:.0%} of the modelled bytes + "
        f"{MARGIN_BYTES / 2**30:.0f} GiB (a stated margin)",
        notes=notes,
    )
