"""Memory predictions for a job's what-ifs: traits read from the trace, the constant calibrated on it.

:func:`model_traits` reads what the memory model needs and :class:`JobConfig` does not say
(precision, vocabulary, dropout, fused attention) from the trace. :func:`calibrate` anchors the
model's "other" constant on the trace's own memory records: ``other = measured peak - modelled
peak`` of the traced configuration (the largest over ranks, so no measured rank is under-predicted).
It is applied unchanged to every what-if. It can be negative: the model counts gradients and
activations at their largest at the same time, while an eager PyTorch step frees activations as
gradients appear. Without records the stated margin of :mod:`lumos_core.whatif.memory_model` is used.

CPU records count what the CPU allocator saw while memory profiling was on (see
:mod:`lumos_core.trace.memory`); CUDA records are the caching allocator's, and there the reserved
bytes (what the GPU really gives up) anchor the constant.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from lumos_core.trace.memory import DEVICE_CPU
from lumos_core.trace.memory_summary import NO_MEMORY_HINT, measured_peaks
from lumos_core.trace.model import Job, Kind, RankTrace
from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.memory_model import (
    MARGIN_BYTES,
    MARGIN_FRACTION,
    MemoryPrediction,
    ModelTraits,
    predict_memory,
    stage_parts,
)

__all__ = ["Calibration", "calibrate", "model_traits", "predict_for_job"]

_HALF = ("bfloat16", "bf16", "c10::half", "fp16", "f16", "half")


@dataclass(frozen=True)
class Calibration:
    other: int | None  # bytes per rank; None: no records, use the margin
    how: str


def _strings(job: Job) -> list[str]:
    return [s.lower() for s in job.ranks[0].strings] if job.ranks else []


def _precision(job: Job) -> tuple[str, str]:
    synth = job.ranks[0].metadata.get("lumos_synth_config") if job.ranks else None
    if isinstance(synth, dict):
        return "bf16", "lumos synth jobs are bf16 mixed precision"
    t = job.ranks[0]
    gemm = np.flatnonzero(
        (t.kind == Kind.CPU_OP)
        & np.isin(t.name, [i for i, s in enumerate(t.strings) if s in ("aten::mm", "aten::addmm")])
    )[:20]
    types = [str(t.args_of(int(i)).get("Input type", "")).lower() for i in gemm.tolist()]
    if any(any(h in x for h in _HALF) for x in types):
        return "bf16", "16-bit GEMM inputs (Input type) - mixed precision assumed"
    if any("float" in x for x in types):
        return "fp32", "fp32 GEMM inputs (Input type)"
    kernels = [t.strings[i].lower() for i in np.unique(t.name[t.kind == Kind.KERNEL]).tolist()]
    if any(("bf16" in k or "f16" in k or "h884" in k or "h1688" in k) for k in kernels):
        return "bf16", "16-bit GEMM kernels - mixed precision assumed"
    if kernels:
        return "bf16", "GPU trace without dtype information: mixed precision assumed (guess)"
    return "fp32", "CPU trace without dtype information: fp32 assumed (guess)"


def model_traits(job: Job, baseline: Baseline) -> ModelTraits:
    """Precision, vocabulary, dropout and attention kind of the traced model."""
    precision, p_how = _precision(job)
    names = _strings(job)
    vocab_field = baseline.fields.get("vocab")
    vocab = int(vocab_field.value) if vocab_field and vocab_field.value else None
    synth = job.ranks[0].metadata.get("lumos_synth_config") if job.ranks else None
    if isinstance(synth, dict) and isinstance(synth.get("model"), dict) and synth["model"].get("vocab"):
        vocab = int(synth["model"]["vocab"])
    dropout = any("dropout" in s for s in names)
    fused = any(k in s for s in names for k in ("flash", "scaled_dot_product", "fmha", "efficient_attention"))
    return ModelTraits(
        precision=precision,
        vocab=vocab,
        dropout=dropout,
        fused_attention=fused,
        how={
            "precision": p_how,
            "vocab": (vocab_field.how if vocab_field and vocab_field.value else "recorded by lumos synth")
            if vocab
            else "unknown",
            "dropout": "dropout ops in the trace" if dropout else "no dropout ops in the trace",
            "fused_attention": "flash/SDPA attention in the trace" if fused else "no fused attention found",
        },
    )


def _steady_low(rank: RankTrace, device_type: int, device_id: int) -> int:
    """Lowest Total Allocated of a device in the rank's last iteration (the last half of the records
    when there are no iterations)."""
    rows = rank.memory.of_device(device_type, device_id)
    ts = rank.memory.ts[rows]
    if rank.iterations:
        it = rank.iterations[-1]
        inside = rows[(ts >= it.cpu_start) & (ts <= it.cpu_end)]
        rows = inside if len(inside) else rows
    else:
        rows = rows[len(rows) // 2 :]
    return int(rank.memory.allocated[rows].min())


def _margin_text() -> str:
    return f"other = {MARGIN_FRACTION:.0%} of the modelled bytes + {MARGIN_BYTES / 2**30:.0f} GiB (a stated margin)"


def _stage_of(rank: int, cfg: JobConfig) -> int:
    return min(rank // max(1, cfg.tp * cfg.dp), cfg.pp - 1)


def calibrate(job: Job, baseline: Baseline, traits: ModelTraits) -> Calibration:
    """The "other" constant from the measured peaks of the traced configuration."""
    peaks = measured_peaks(job)
    cfg = baseline.config
    if not peaks:
        return Calibration(
            None,
            f"{_margin_text()} ({NO_MEMORY_HINT.split(':')[0]}; record with profile_memory=True to calibrate on a measured peak)",
        )
    try:
        parts = {st: stage_parts(cfg, traits, st)[0] for st in range(cfg.pp)}
    except ValueError as exc:  # model shape unknown
        return Calibration(None, f"memory records present but not used ({exc})")
    modelled = {st: p.modelled for st, p in parts.items()}
    for r, d in peaks.items():
        persistent = parts[_stage_of(r, cfg)].params + parts[_stage_of(r, cfg)].optimizer
        low = _steady_low(job.rank(r), d.device_type, d.device_id)
        if d.device_type == DEVICE_CPU and low < persistent:
            # Weights and optimizer states live through every step, so the records' low point
            # cannot be below them unless the profiler started after they were allocated: the CPU
            # allocator never reported them, and the records cannot anchor a whole-memory model.
            return Calibration(
                None,
                f"CPU memory records of rank {r} fall to {low / 2**20:,.1f} MiB in the last iteration, below "
                f"the modelled weights and optimizer states ({persistent / 2**20:,.1f} MiB): they leave out "
                "tensors allocated before profiling started, so they are not used; " + _margin_text(),
            )
    best_rank, best = max(
        ((r, d.peak_bytes - modelled[_stage_of(r, cfg)]) for r, d in peaks.items()), key=lambda x: x[1]
    )
    d = peaks[best_rank]
    kind = "reserved" if d.peak_reserved > 0 else "allocated"
    how = (
        f"other = measured peak ({kind}, {d.label}) of rank {best_rank}, {d.peak_bytes / 2**20:,.1f} MiB, "
        f"minus the modelled {modelled[_stage_of(best_rank, cfg)] / 2**20:,.1f} MiB of the traced configuration"
    )
    return Calibration(int(best), how)


# Traits and calibration depend only on the job and its baseline: sweeps ask for them per point.
# Keyed by id(job) with a weak reference to check it is still that job (Job is not hashable).
_MEMO: dict[int, tuple[weakref.ref[Job], dict[JobConfig, tuple[ModelTraits, Calibration]]]] = {}


def predict_for_job(
    job: Job, baseline: Baseline, config: JobConfig, traits: ModelTraits | None = None,
    calibration: Calibration | None = None,
) -> MemoryPrediction:  # fmt: skip
    """Predicted peak memory of ``config`` for what-ifs of ``job`` (calibrated where possible)."""
    if traits is None or calibration is None:
        for key in [k for k, (ref, _) in _MEMO.items() if ref() is None]:
            del _MEMO[key]
        entry = _MEMO.get(id(job))
        if entry is None or entry[0]() is not job:
            entry = _MEMO[id(job)] = (weakref.ref(job), {})
        memo = entry[1]
        if baseline.config not in memo:
            found = model_traits(job, baseline)
            memo[baseline.config] = (found, calibrate(job, baseline, found))
        traits, calibration = memo[baseline.config]
    pred = predict_memory(config, traits, calibration.other, calibration.how)
    pred.notes.append(
        f"precision {traits.precision} ({traits.how.get('precision', '')}); "
        f"recompute {config.recompute}; ZeRO stage {config.zero}"
    )
    return pred
