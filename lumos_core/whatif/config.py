"""What-if configurations: parallelism, model shape and hardware, and their validation.

A :class:`JobConfig` describes a training job the way an engineer thinks about it. The baseline
(inferred from the trace, :mod:`lumos_core.whatif.baseline`) is one; a what-if is another, usually made
with :meth:`JobConfig.with_changes`. :func:`problems` explains what is wrong with a combination
before anything runs (the app shows it inline, the CLI exits 2 with it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import get_gpu, known_gpu_names
from lumos_core.perf.schedules import SCHEDULES

# Fields a user can change from the CLI/app, with the CLI flag that sets them.
KNOBS: dict[str, str] = {
    "dp": "--dp",
    "tp": "--tp",
    "pp": "--pp",
    "microbatches": "--microbatches",
    "schedule": "--schedule",
    "layers": "--layers",
    "hidden": "--hidden",
    "ffn": "--ffn",
    "heads": "--heads",
    "seq": "--seq",
    "micro_batch": "--micro-batch",
    "gpu": "--gpu",
    "nvlink_gbps": "--nvlink-gbps",
    "network_gbps": "--network-gbps",
    "recompute": "--recompute",
    "zero": "--zero",
    "cpu_scale": "--cpu-scale",
}
# Activation recomputation (Korthikanti et al. 2022): none, selective (attention core) or full.
RECOMPUTE_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class JobConfig:
    """A training configuration. Model fields may be None when unknown (not inferable, not given)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    layers: int | None = None
    hidden: int | None = None
    ffn: int | None = None
    heads: int | None = None
    seq: int | None = None
    micro_batch: int | None = None
    gpu: str = "H100"
    nvlink_gbps: float | None = None  # per-GPU NVLink bus bandwidth override (GB/s)
    network_gbps: float | None = None  # per-GPU inter-node bandwidth override (GB/s)
    recompute: str = "none"  # activation recomputation: none, selective, full (memory model)
    zero: int = 0  # distributed optimizer / ZeRO stage: 1 optimizer states, 2 + grads, 3 + weights over DP
    cpu_scale: float = 1.0  # host-side (Python, launch) time x this (CUDA graphs, torch.compile, no profiler)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    def with_changes(self, **changes: Any) -> JobConfig:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["world_size"] = self.world_size
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def label(self, baseline: JobConfig | None = None) -> str:
        """A short scenario name: what differs from ``baseline`` ("DP 16", "PP 4 x 16 microbatches")."""
        if baseline is None:
            return f"TP{self.tp} PP{self.pp} DP{self.dp}"
        names = {
            "dp": "DP",
            "tp": "TP",
            "pp": "PP",
            "microbatches": "microbatches",
            "layers": "layers",
            "hidden": "hidden",
            "ffn": "FFN",
            "heads": "heads",
            "seq": "seq",
            "micro_batch": "micro-batch",
            "gpu": "",
            "schedule": "",
            "nvlink_gbps": "NVLink GB/s",
            "network_gbps": "network GB/s",
            "recompute": "recompute",
            "zero": "ZeRO",
            "cpu_scale": "host time x",
        }
        parts = []
        for f in dataclasses.fields(self):
            a, b = getattr(baseline, f.name), getattr(self, f.name)
            if a != b and b is not None:
                parts.append(f"{names[f.name]} {b}".strip())
        return " \u00d7 ".join(parts) if parts else "baseline replay"


@dataclass
class Inferred:
    """One baseline field: its value, how confident we are, and how it was found."""

    value: Any
    confidence: str  # "certain" (recorded in the trace), "inferred", "guess", "unknown"
    how: str


@dataclass
class Baseline:
    """The configuration the trace was recorded with, field by field with provenance."""

    config: JobConfig
    fields: dict[str, Inferred] = field(default_factory=dict)
    groups: dict[str, list[list[int]]] = field(default_factory=dict)  # role -> process groups (ranks)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "fields": {
                k: {"value": v.value, "confidence": v.confidence, "how": v.how}
                for k, v in self.fields.items()
            },
            "groups": self.groups,
            "notes": self.notes,
        }


def problems(config: JobConfig, baseline: Baseline | None = None) -> list[str]:
    """Why ``config`` cannot be estimated (empty when it can). Messages say what to change."""
    out: list[str] = []
    for name in ("dp", "tp", "pp", "microbatches"):
        v = getattr(config, name)
        if not isinstance(v, int) or v < 1:
            out.append(f"{name} must be a whole number >= 1 (got {v!r})")
    for name in ("layers", "hidden", "ffn", "heads", "seq", "micro_batch"):
        v = getattr(config, name)
        if v is not None and (not isinstance(v, int) or v < 1):
            out.append(f"{name} must be a whole number >= 1 (got {v!r})")
    if config.recompute not in RECOMPUTE_MODES:
        out.append(f"unknown recompute mode {config.recompute!r}: use {', '.join(RECOMPUTE_MODES)}")
    if not isinstance(config.zero, int) or not 0 <= config.zero <= 3:
        out.append(f"zero must be a ZeRO stage 0-3 (got {config.zero!r})")
    if config.schedule not in SCHEDULES:
        out.append(f"unknown schedule {config.schedule!r}: use {' or '.join(SCHEDULES)}")
    try:
        get_gpu(config.gpu)
    except ConfigError:
        out.append(f"unknown GPU {config.gpu!r}: use one of {', '.join(known_gpu_names())}")
    for name in ("nvlink_gbps", "network_gbps"):
        v = getattr(config, name)
        if v is not None and not v > 0:
            out.append(f"{name} must be > 0 GB/s")
    if not isinstance(config.cpu_scale, (int, float)) or not 0 <= config.cpu_scale <= 100:
        out.append(f"cpu_scale must be a factor between 0 and 100 (got {config.cpu_scale!r})")
    if out:
        return out
    if config.layers is not None and config.layers % config.pp:
        out.append(
            f"{config.layers} layers do not divide into {config.pp} pipeline stages evenly "
            f"(try {config.layers - config.layers % config.pp or config.pp} or {config.layers + config.pp - config.layers % config.pp} layers)"
        )
    if config.heads is not None and config.heads % config.tp:
        out.append(f"{config.heads} attention heads do not split over TP {config.tp}")
    if config.hidden is not None and config.heads is not None and config.hidden % config.heads:
        out.append(f"hidden size {config.hidden} is not a multiple of {config.heads} heads")
    if config.ffn is not None and config.ffn % config.tp:
        out.append(f"FFN size {config.ffn} does not split over TP {config.tp}")
    if config.heads is None and config.hidden is not None and config.hidden % config.tp:
        # heads unknown: hidden = heads x head size, so TP dividing the heads divides the hidden size
        out.append(f"hidden size {config.hidden} does not split over TP {config.tp}")
    if baseline is not None:
        b = baseline.config
        needs_layers = (config.pp != b.pp) or (config.layers is not None and config.layers != b.layers)
        if needs_layers and b.layers is None:
            out.append(
                "changing the pipeline degree or the number of layers needs the trace's layer structure, "
                "which could not be inferred: give the baseline with --baseline-layers N"
            )
        for name in ("hidden", "ffn", "heads", "seq", "micro_batch"):
            if (
                getattr(config, name) is not None
                and getattr(config, name) != getattr(b, name)
                and getattr(b, name) is None
            ):
                out.append(
                    f"changing {name} needs its value in the trace, which is unknown: give it with "
                    f"--baseline-{name.replace('_', '-')} N"
                )
    return out


def unchecked(config: JobConfig, baseline: Baseline | None = None) -> list[str]:
    """Checks :func:`problems` could not make for want of a value (said beside the estimate)."""
    out: list[str] = []
    changed_tp = baseline is None or config.tp != baseline.config.tp
    if config.tp > 1 and changed_tp and config.heads is None:
        out.append(
            f"TP {config.tp}: whether it divides the attention heads could not be checked (the number "
            "of heads is unknown: give it with --baseline-heads N)"
        )
    return out


def check(config: JobConfig, baseline: Baseline | None = None) -> None:
    """Raise ConfigError with every problem of ``config``."""
    found = problems(config, baseline)
    if found:
        raise ConfigError("; ".join(found))
