"""Throughput and model FLOPs utilisation of a configuration: the headline beside iteration time.

Iteration time alone misleads when a what-if changes the work done per iteration (microbatches,
micro-batch size, sequence length, data parallelism): 16 microbatches in 10 ms beat 8 in 7 ms. So
every headline states the rate per GPU (tokens/s when the micro-batch size and sequence length are
known, else samples/s, else microbatches/s: the unit says which) and the model FLOPs utilisation
(MFU: model FLOPs per iteration, :func:`lumos_core.perf.flops.iteration_flops` without the
recomputed forward, over the iteration time and the GPUs' bf16 peak), and configurations that do
different work are ranked by the rate, not by the iteration time.

The model FLOPs need the layers, hidden and FFN sizes and the sequence length; the trace's GEMMs
give them when ``record_shapes`` was on. Attention is counted as multi-head (Q, K, V each as wide
as the hidden size) and the FFN as two GEMMs (the trace's FFN width), as GPT models are; the LM
head only when the vocabulary is known. MFU is unknown (NaN) otherwise, and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lumos_core.perf.costs import peak_flops
from lumos_core.perf.flops import iteration_flops
from lumos_core.whatif.config import Baseline, JobConfig

# The Host time x factor of the one-click "assume GPU-bound": what CUDA graphs or torch.compile
# typically leave of an eager PyTorch job's host time (the cpu_scale knob's own help says ~0.3).
GPU_BOUND_CPU_SCALE = 0.3
# Knobs that change the work one iteration does (tokens or samples): their scenarios rank by rate.
WORK_KNOBS = ("dp", "microbatches", "micro_batch", "seq", "layers", "hidden", "ffn")
# Of those, the ones that change the model (FLOPs per token): their rate compares as model FLOP/s.
MODEL_KNOBS = ("layers", "hidden", "ffn", "seq")

__all__ = [
    "GPU_BOUND_CPU_SCALE",
    "MODEL_KNOBS",
    "WORK_KNOBS",
    "Throughput",
    "rank_key",
    "throughput_of",
    "tokens_per_iteration",
    "vocab_of",
    "work_changed",
]


def tokens_per_iteration(config: JobConfig) -> int | None:
    """micro-batch x seq x microbatches x DP, when the micro-batch size and sequence length are known."""
    if config.micro_batch is None or config.seq is None:
        return None
    return config.micro_batch * config.seq * config.microbatches * config.dp


@dataclass(frozen=True)
class _Shape:
    """A GPT-style model shape for :func:`~lumos_core.perf.flops.iteration_flops`."""

    layers: int
    hidden: int
    ffn: int
    seq: int
    vocab: int

    @property
    def attn_dim(self) -> int:
        return self.hidden

    @property
    def qkv_dim(self) -> int:
        return 3 * self.hidden

    @property
    def ffn_in_dim(self) -> int:
        return self.ffn


@dataclass(frozen=True)
class Throughput:
    """Work and rate of one configuration at one iteration time (plain data, picklable)."""

    iteration_us: float
    world_size: int
    unit: str  # "tokens", "samples" or "microbatches": what ``per_iteration`` counts
    per_iteration: float  # units of work the whole job does per iteration
    model_flops: float  # model FLOPs per iteration, whole job (NaN unknown)
    peak_flops_per_gpu: float  # bf16 peak of the configuration's GPU
    mfu_unknown: str = ""  # why MFU is unknown ("" when known)

    @property
    def per_s_per_gpu(self) -> float:
        """Units of work per second per GPU (NaN without a complete iteration)."""
        if not self.iteration_us or not self.world_size:
            return math.nan
        return self.per_iteration / (self.iteration_us / 1e6) / self.world_size

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.per_s_per_gpu if self.unit == "tokens" else math.nan

    @property
    def flops_per_s_per_gpu(self) -> float:
        """Model FLOP/s per GPU (NaN unknown): the rate that compares across model shapes too."""
        if not self.iteration_us or math.isnan(self.model_flops) or not self.world_size:
            return math.nan
        return self.model_flops / (self.iteration_us / 1e6) / self.world_size

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, a fraction of the bf16 peak (NaN unknown)."""
        if not self.iteration_us or math.isnan(self.model_flops) or not self.peak_flops_per_gpu:
            return math.nan
        return self.model_flops / (self.iteration_us / 1e6) / (self.world_size * self.peak_flops_per_gpu)

    def rate_text(self) -> str:
        """``"41,250 tokens/s/GPU"``."""
        r = self.per_s_per_gpu
        if math.isnan(r):
            return f"{self.unit}/s/GPU unknown"
        return f"{r:,.0f} {self.unit}/s/GPU" if r >= 100 else f"{r:,.2f} {self.unit}/s/GPU"

    def mfu_text(self) -> str:
        """``"MFU 38.2 %"`` or ``"MFU unknown"``."""
        m = self.mfu
        return "MFU unknown" if math.isnan(m) else f"MFU {100 * m:.1f} %"

    def text(self) -> str:
        """The headline: ``"41,250 tokens/s/GPU, MFU 38.2 %"``."""
        return f"{self.rate_text()}, {self.mfu_text()}"

    def change_pct(self, other: Throughput) -> float:
        """This rate per GPU against ``other``'s, in % (NaN when either is unknown or units differ)."""
        a, b = other.per_s_per_gpu, self.per_s_per_gpu
        if self.unit != other.unit or not a or math.isnan(a) or math.isnan(b):
            return math.nan
        return 100.0 * (b / a - 1)

    def as_dict(self) -> dict[str, Any]:
        def num(v: float, nd: int) -> float | None:
            return None if math.isnan(v) else round(v, nd)

        return {
            "unit": self.unit,
            "per_iteration": self.per_iteration,
            "per_s_per_gpu": num(self.per_s_per_gpu, 3),
            "tokens_per_s_per_gpu": num(self.tokens_per_s_per_gpu, 3),
            "model_flops_per_iteration": num(self.model_flops, 0),
            "peak_flops_per_gpu": self.peak_flops_per_gpu,
            "mfu": num(self.mfu, 5),
            "mfu_unknown": self.mfu_unknown,
        }


def vocab_of(baseline: Baseline) -> int | None:
    """The vocabulary the baseline inference found (the LM head's width), or None."""
    f = baseline.fields.get("vocab")
    return int(f.value) if f is not None and f.value else None


def throughput_of(config: JobConfig, iteration_us: float, vocab: int | None = None) -> Throughput:
    """The work ``config`` does per iteration and its rate at ``iteration_us``."""
    tokens = tokens_per_iteration(config)
    if tokens is not None:
        unit, per_iteration = "tokens", float(tokens)
    elif config.micro_batch is not None:
        unit, per_iteration = "samples", float(config.micro_batch * config.microbatches * config.dp)
    else:
        unit, per_iteration = "microbatches", float(config.microbatches * config.dp)
    missing = [k for k in ("layers", "hidden", "ffn", "seq", "micro_batch") if getattr(config, k) is None]
    flops, why = math.nan, ""
    if missing:
        why = (
            "MFU unknown: the trace records no " + ", ".join(missing) + " (give them with --baseline-<knob>)"
        )
    else:
        shape = _Shape(config.layers, config.hidden, config.ffn, config.seq, vocab or 0)
        flops = iteration_flops(shape, config.micro_batch * config.microbatches * config.dp)
    return Throughput(
        iteration_us=float(iteration_us),
        world_size=int(config.world_size),
        unit=unit,
        per_iteration=per_iteration,
        model_flops=flops,
        peak_flops_per_gpu=float(peak_flops(config.hardware)),
        mfu_unknown=why,
    )


def work_changed(base: JobConfig, config: JobConfig) -> bool:
    """Does ``config`` do different work per iteration than ``base`` (so rank by rate)?"""
    return any(getattr(base, k) != getattr(config, k) for k in WORK_KNOBS)


def rank_key(t: Throughput) -> tuple[int, float]:
    """Sort key, best first: model FLOP/s per GPU when known (a tokens/s of a smaller model is no
    gain), else the rate per GPU; descending, unknown last."""
    f = t.flops_per_s_per_gpu
    if not math.isnan(f):
        return (0, -f)
    r = t.per_s_per_gpu
    return (1, math.inf if math.isnan(r) else -r)
