"""What-if configurations: parallelism, model shape and hardware, and their validation.

A :class:`JobConfig` describes a training job the way an engineer thinks about it. The baseline
(inferred from the trace, :mod:`lumos_core.whatif.baseline`) is one; a what-if is another, usually made
with :meth:`JobConfig.with_changes`. :func:`problems` explains what is wrong with a combination
before anything runs (the app shows it inline, the CLI exits 2 with it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import GpuProfile, get_gpu
from lumos_core.whatif.knob_registry import KNOB, RECOMPUTE_MODES, REGISTRY

# Fields a user can change from the CLI/app, with the CLI flag that sets them (from the registry).
KNOBS: dict[str, str] = {k.name: k.flag for k in REGISTRY}
__all__ = ["KNOBS", "RECOMPUTE_MODES", "Baseline", "Inferred", "JobConfig", "check", "problems", "unchecked"]


class JobConfigMethods:
    """What a :class:`JobConfig` does; its fields are the knobs of the registry
    (:mod:`lumos_core.whatif.knob_registry`), one each, with the knob's type and default."""

    dp: int
    tp: int
    pp: int
    cp: int
    gpu: str

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @cached_property
    def gpu_profile(self) -> GpuProfile:
        """The GPU profile named by ``gpu`` (resolved once per configuration; raises ConfigError
        for an unknown GPU)."""
        return get_gpu(self.gpu)

    @cached_property
    def hardware(self) -> GpuProfile:
        """:attr:`gpu_profile` with this configuration's link overrides (``nvlink_gbps``,
        ``network_gbps``: the knobs with a ``profile_field``)."""
        changes = {
            k.profile_field: getattr(self, k.name) * 1e9
            for k in REGISTRY
            if k.profile_field and getattr(self, k.name)
        }
        return dataclasses.replace(self.gpu_profile, **changes) if changes else self.gpu_profile

    def with_changes(self, **changes: Any) -> JobConfig:
        unknown = set(changes) - set(KNOB)
        if unknown:
            raise ConfigError(f"unknown configuration field(s): {', '.join(sorted(unknown))}")
        kv = getattr(self, "kv_heads", None)
        if kv is not None and changes.get("heads") is not None and changes.get("kv_heads") is None and kv == getattr(self, "heads", None):
            changes = {**changes, "kv_heads": changes["heads"]}  # multi-head attention stays so
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[type-var]

    def as_dict(self) -> dict[str, Any]:
        d = {k.name: getattr(self, k.name) for k in REGISTRY}
        d["world_size"] = self.world_size
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobConfig:
        return JobConfig(**{k: v for k, v in d.items() if k in KNOB})

    def label(self, baseline: JobConfig | None = None) -> str:
        """A short scenario name: what differs from ``baseline`` ("DP 16", "PP 4 x 16 microbatches")."""
        if baseline is None:  # CP and VP only when in use: "TP2 PP2 DP2" must not name a 16-GPU CP2 job
            extra = "".join(f" {k}{getattr(self, k.lower())}" for k in ("CP", "VP") if getattr(self, k.lower(), 1) > 1)
            return f"TP{self.tp} PP{self.pp} DP{self.dp}{extra}"
        parts = []
        for k in REGISTRY:
            a, b = getattr(baseline, k.name), getattr(self, k.name)
            if a != b and b is not None:
                parts.append(f"{k.short} {b}".strip())
        return " \u00d7 ".join(parts) if parts else "baseline replay"


# A training configuration: one field per knob of the registry, in its order, with the knob's
# default (model fields may be None when unknown: not inferable, not given). Frozen and hashable;
# picklable (sweep workers) as ``lumos_core.whatif.config.JobConfig``.
JobConfig = dataclasses.make_dataclass(
    "JobConfig",
    [(k.name, k.type if not k.optional else k.type | None, field(default=k.default)) for k in REGISTRY],
    bases=(JobConfigMethods,),
    frozen=True,
)
JobConfig.__module__ = __name__  # (make_dataclass's module= needs Python 3.12)
JobConfig.__doc__ = (
    "A training configuration. Model fields may be None when unknown (not inferable, not given)."
)


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
    out = [p for p in (k.problem_with(getattr(config, k.name)) for k in REGISTRY) if p]
    if out:
        return out
    if config.layers is not None and config.layers % config.pp:
        out.append(
            f"{config.layers} layers do not divide into {config.pp} pipeline stages evenly "
            f"(try {config.layers - config.layers % config.pp or config.pp} or {config.layers + config.pp - config.layers % config.pp} layers)"
        )
    # an interleaved trace keeps its VP unless told: say so, or "--pp 1" reads as a refusal of PP 1
    as_traced = baseline is not None and baseline.config.vp == config.vp > 1
    kept_vp = f" (VP {config.vp} as traced; VP 1, --vp 1, for a plain pipeline)" if as_traced else ""
    vp_problems = len(out)
    if config.vp > 1 and (config.pp < 2 or config.microbatches % config.pp):
        out.append(
            f"{config.vp} virtual stages (interleaved 1F1B) need at least 2 pipeline stages and "
            f"microbatches a multiple of them ({config.microbatches} microbatches, PP {config.pp})"
        )
    if config.vp > 1 and config.schedule != "1f1b":
        out.append(f"virtual stages interleave the 1f1b schedule, not {config.schedule}")
    if config.vp > 1 and config.layers is not None and config.layers % (config.pp * config.vp):
        out.append(f"{config.layers} layers do not split into {config.pp} x {config.vp} virtual stages")
    if kept_vp and len(out) > vp_problems:
        out[vp_problems] += kept_vp
    # Megatron balances causal attention over CP by cutting the sequence in 2 x CP chunks (rank i
    # holds chunks i and 2CP-1-i): the sequence must split into those, not just into CP parts
    if config.cp > 1 and config.seq is not None and config.seq % (2 * config.cp):
        out.append(
            f"sequence {config.seq} does not split over CP {config.cp} (load-balanced context "
            f"parallelism cuts it into 2 x CP = {2 * config.cp} equal chunks)"
        )
    if config.kv_heads is not None and config.heads is not None and config.heads % config.kv_heads:
        out.append(f"{config.heads} attention heads are not a multiple of {config.kv_heads} KV heads")
    if config.kv_heads is not None and config.kv_heads % config.tp and config.tp % config.kv_heads:
        out.append(f"{config.kv_heads} KV heads do not split over TP {config.tp}")
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
        for name in (k.name for k in REGISTRY if k.needs_traced):
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
