"""The one description of every what-if knob.

Each :class:`Knob` says what a user may change about a training job: its name (the field of
:class:`~lumos_core.whatif.config.JobConfig`), type and default, unit, the label and help the CLI
and the app show, the app group it sits in, how a value is validated, and which rule of the
estimate applies when it changes (:attr:`Knob.rules`). Everything else is generated from
:data:`REGISTRY`: ``JobConfig``'s fields and their validation (``config``), the text form of
changes (``knobs``), the options of ``lumos estimate``/``sweep``/``validate`` (``commands/knob_args``),
the sweep grid's parsing (``sweep/grid``) and the app's What-if form (``app/whatif``).

Adding a knob: append a :class:`Knob` here, and write the rule it names (see docs/architecture.md,
"Adding a knob"). A knob whose effect on time is not modelled yet says so with ``rules=()``: every
estimate that changes it then carries a note naming it, instead of a silent unchanged prediction.

This module imports nothing of the what-if engine (``config`` builds on it); the rules are named
here and implemented in ``whatif/retime`` (duration rules, :data:`~lumos_core.whatif.retime.rules.RULES`)
or by the graph rewrite (``whatif/rewrite``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import get_gpu, known_gpu_names
from lumos_core.perf.schedules import SCHEDULES

# Activation recomputation (Korthikanti et al. 2022): none, selective (attention core) or full.
RECOMPUTE_MODES = ("none", "selective", "full")

# What a knob's change does to the estimate (:attr:`Knob.rules`), besides the memory prediction
# (every knob reaches it through JobConfig):
REWRITE = "rewrite"  # rebuilds the execution graph (pipeline, microbatches, layers): whatif/rewrite
SCHEDULE = "schedule"  # read by the rewrite when it rebuilds the pipeline; alone it changes nothing
MEMORY = "memory"  # memory model only: the predicted time does not move (honestly so)
# Duration rules, in whatif/retime/rules.py (RULES), applied in this order:
TIME_RULES = ("compute", "tp_allreduce", "sp", "cp", "recompute", "hardware", "collectives", "host")
EFFECTS = (REWRITE, SCHEDULE, MEMORY, *TIME_RULES)

# The app's What-if panel groups, in this order.
GROUPS = ("Parallelism", "Model", "Hardware", "Memory")
# How the sweep grid suggests values around the traced one (sweep.grid.default_values).
POWERS, AROUND, CHOICES, CURRENT = "powers of two", "halves and doubles", "choices", "current"

TRUE_TEXT = ("true", "yes", "on", "1")
FALSE_TEXT = ("false", "no", "off", "0")


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One what-if knob. Validation: ``minimum``/``maximum`` (``exclusive_minimum`` for "> 0"),
    ``choices`` (static values), or ``valid`` (a predicate, for values resolved elsewhere such as
    GPU names); ``optional`` knobs may be None (not inferable from the trace and not given)."""

    name: str
    type: type  # int, float, str or bool
    default: Any
    group: str  # the app panel group (GROUPS)
    label: str  # the app's label
    short: str  # scenario labels: "DP 16" ("" shows the value alone, e.g. "H200")
    help: str
    rules: tuple[str, ...]  # EFFECTS: what changing it does to the estimate; () = not modelled yet
    unit: str = ""  # "GB/s", "x" (a factor)
    metavar: str | None = None
    optional: bool = False
    minimum: float | None = None
    exclusive_minimum: bool = False
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    valid: Callable[[Any], bool] | None = None
    listed: Callable[[], Sequence[Any]] | None = None  # values to pick from when not a fixed set
    profile_field: str = ""  # the GpuProfile rate (bytes/s) it overrides, given in GB/s
    noun: str = ""  # in messages: "unknown <noun> 'x'", "<name> must be <noun> between ..."
    shape: bool = False  # describes the job's structure: inferred from a trace, compared by diff/validate
    overridable: bool = False  # the trace may not record it: --baseline-<name> gives the traced value
    needs_traced: bool = False  # changing it needs its traced value (the ratio new / traced)
    suggest: str = CURRENT  # how a sweep suggests values around the traced one
    assumed: tuple[str, str] = ("guess", "assumed: the trace does not record it")  # when not inferred
    problem: str = ""  # a message template for an invalid value ({name}, {value!r}), else generated

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def retimed(self) -> bool:
        """Whether the estimate has a rule for its effect on time (``rules`` beyond memory)."""
        return any(r != MEMORY for r in self.rules)

    def coerce(self, value: Any) -> Any:
        """``value`` (text or number) as this knob's type; raises ConfigError naming the knob."""
        if value is None:
            return None
        if self.type is bool:
            return _as_bool(self.name, value)
        if self.type is int:
            return _as_int(self.name, value)
        if self.type is float:
            try:
                return float(value)
            except (TypeError, ValueError):
                what = "a factor" if self.unit == "x" else f"a number ({self.unit})"
                raise ConfigError(f"{self.name} must be {what}, not {value!r}") from None
        return str(value).strip()

    def text(self, value: Any) -> str:
        """``value`` as :func:`coerce` reads it back ("0.3", "true", "16")."""
        if isinstance(value, bool):
            return "true" if value else "false"
        return f"{value:g}" if isinstance(value, float) else str(value)

    def problem_with(self, value: Any) -> str:
        """Why ``value`` is not valid for this knob ("" when it is)."""
        if value is None and self.optional:
            return ""
        if self._ok(value):
            return ""
        if self.problem:
            return self.problem.format(name=self.name, value=value)
        if self.choices is not None:
            use = " or ".join if len(self.choices) == 2 else ", ".join
            return f"unknown {self.noun or self.name} {value!r}: use {use(str(c) for c in self.choices)}"
        if self.type is int:
            return f"{self.name} must be a whole number >= {self.minimum:g} (got {value!r})"
        if self.type is bool:
            return f"{self.name} must be true or false (got {value!r})"
        if self.maximum is not None:
            return (
                f"{self.name} must be {self.noun or 'a number'} between {self.minimum:g} and "
                f"{self.maximum:g} (got {value!r})"
            )
        return f"{self.name} must be > {self.minimum:g} {self.unit}".rstrip()

    def _ok(self, value: Any) -> bool:
        if self.type is bool:
            return isinstance(value, bool)
        if self.type is int and not isinstance(value, int):
            return False
        if self.type is float and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return False
        if self.choices is not None and value not in self.choices:
            return False
        if self.valid is not None and not self.valid(value):
            return False
        if self.minimum is not None:  # written so that NaN fails too
            above = value > self.minimum if self.exclusive_minimum else value >= self.minimum
            if not above:
                return False
        return self.maximum is None or bool(value <= self.maximum)

    def values(self) -> list[Any]:
        """The values a user picks from (an app combo box), or [] for a free value."""
        if self.type is bool:
            return [True, False]
        if self.listed is not None:
            return list(self.listed())
        return list(self.choices or ())


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in TRUE_TEXT:
        return True
    if text in FALSE_TEXT:
        return False
    raise ConfigError(f"{name} must be true or false, not {value!r}")


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a whole number, not {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{name} must be a whole number, not {value!r}")
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, not {value!r}") from None


def _known_gpu(name: Any) -> bool:
    try:
        get_gpu(str(name))
    except ConfigError:
        return False
    return True


def _parallel(name: str, **kw: Any) -> Knob:
    """A parallelism degree: a whole number >= 1, swept over powers of two."""
    return Knob(name=name, type=int, default=1, group="Parallelism", metavar="N", minimum=1,
                shape=True, suggest=POWERS, **kw)  # fmt: skip


def _shape(name: str, **kw: Any) -> Knob:
    """A model dimension: a whole number >= 1, unknown (None) when the trace does not record it."""
    kw.setdefault("rules", ("compute", "collectives"))  # kernel shapes and message sizes
    kw.setdefault("needs_traced", True)
    return Knob(name=name, type=int, default=None, group="Model", metavar="N", optional=True,
                minimum=1, shape=True, overridable=True, suggest=AROUND, **kw)  # fmt: skip


# Every knob, in the order of JobConfig's fields, of the CLI's options and of the app's form.
# fmt: off
REGISTRY: tuple[Knob, ...] = (
    _parallel("dp", label="Data parallel (DP)", short="DP", rules=("collectives",),
              help="replicas of the model; gradients are reduced across them"),
    _parallel("tp", label="Tensor parallel (TP)", short="TP", rules=("compute", "tp_allreduce", "collectives"),
              help="each layer split over this many GPUs"),
    _parallel("pp", label="Pipeline stages (PP)", short="PP", rules=(REWRITE,),
              help="layers split into this many stages"),
    _parallel("microbatches", label="Microbatches", short="microbatches", rules=(REWRITE,),
              help="per iteration and pipeline", overridable=True),
    _parallel("vp", label="Virtual stages (VP)", short="VP", rules=(REWRITE,),
              help="model chunks per pipeline rank (interleaved 1F1B): the bubble shrinks to "
              "(PP-1)/(VP x microbatches), with VP x the pipeline transfers", overridable=True,
              assumed=("guess", "assumed 1: the trace's pipeline is read as not interleaved")),
    Knob(name="sp", type=bool, default=False, group="Parallelism", label="Sequence parallel (SP)",
         short="SP", rules=("sp",), overridable=True, shape=True,
         help="shard the activations outside attention along the sequence over TP: TP all-reduce "
         "becomes reduce-scatter + all-gather (same bytes), norms/dropout/residuals and their "
         "activation memory / TP",
         assumed=("guess", "assumed off: no reduce-scatter/all-gather pattern on the TP group")),
    _parallel("cp", label="Context parallel (CP)", short="CP", rules=("cp", "collectives"),
              help="the sequence split over this many GPUs: per-rank tokens / CP, attention's K/V "
              "exchanged over the CP group; gradients reduced over DP x CP", overridable=True,
              assumed=("guess", "assumed 1: no context-parallel group is recognised in the trace")),
    Knob(name="schedule", type=str, default="1f1b", group="Parallelism", label="Schedule", short="",
         help="pipeline schedule", rules=(SCHEDULE,), choices=tuple(SCHEDULES), noun="schedule",
         assumed=("guess", "assumed: the trace does not name its pipeline schedule")),
    _shape("layers", label="Layers", short="layers", help="transformer layers", rules=(REWRITE,),
           needs_traced=False),  # the rewrite needs the traced layers, and says so itself
    _shape("hidden", label="Hidden size", short="hidden", help="model width"),
    _shape("ffn", label="FFN size", short="FFN", help="MLP width"),
    _shape("heads", label="Attention heads", short="heads", help=""),
    _shape("kv_heads", label="KV heads (GQA)", short="KV heads", rules=("compute",),
           help="key/value heads (grouped-query attention): the QKV GEMM shrinks to (heads + 2 KV "
           "heads) x head dim, and K/V activations with it"),
    Knob(name="mlp", type=str, default="gelu", group="Model", label="MLP", short="MLP",
         help="feed-forward kind: gelu (GPT-3: two GEMMs, h x f and f x h) or swiglu (Llama: gate and "
         "up h x 2f, then down f x h: 1.5x the MLP GEMM work at the same FFN size)",
         rules=("compute",), choices=("gelu", "swiglu"), noun="MLP kind", shape=True, overridable=True,
         assumed=("guess", "assumed gelu: no gate+up GEMM of twice the FFN width found")),
    _shape("seq", label="Sequence length", short="seq", help="tokens per sample"),
    _shape("micro_batch", label="Micro-batch size", short="micro-batch", help="samples per microbatch"),
    Knob(name="gpu", type=str, default="H100", group="Hardware", label="GPU", short="",
         help="GPU profile (peak FLOP/s, memory and link bandwidths): " + ", ".join(known_gpu_names()),
         rules=("hardware", "collectives"), metavar="GPU", valid=_known_gpu, listed=known_gpu_names,
         problem="unknown GPU {value!r}: use one of " + ", ".join(known_gpu_names()), suggest=CHOICES),
    Knob(name="nvlink_gbps", type=float, default=None, group="Hardware", label="NVLink GB/s",
         short="NVLink GB/s", help="per-GPU NVLink bandwidth, per direction", rules=("collectives",),
         unit="GB/s", optional=True, minimum=0, exclusive_minimum=True, profile_field="nvlink_bandwidth"),
    Knob(name="network_gbps", type=float, default=None, group="Hardware", label="Network GB/s",
         short="network GB/s", help="per-GPU inter-node bandwidth", rules=("collectives",),
         unit="GB/s", optional=True, minimum=0, exclusive_minimum=True, profile_field="network_bandwidth"),
    Knob(name="recompute", type=str, default="none", group="Memory", label="Recompute", short="recompute",
         help="activation recomputation: none, selective (attention core runs again in backward), "
         "full (each layer's forward runs again before its backward); less activation memory",
         rules=("recompute",), choices=RECOMPUTE_MODES, noun="recompute mode", overridable=True, shape=True,
         assumed=("guess", "assumed none: no recomputed forward found in the backward pass")),
    Knob(name="zero", type=int, default=0, group="Memory", label="ZeRO stage", short="ZeRO",
         help="distributed optimizer: 1 shards optimizer states over DP, 2 + grads, 3 + weights "
         "(memory model only)", rules=(MEMORY,), choices=(0, 1, 2, 3),
         problem="{name} must be a ZeRO stage 0-3 (got {value!r})"),
    Knob(name="cpu_scale", type=float, default=1.0, group="Hardware", label="Host time ×",
         short="host time x", rules=("host",), unit="x", metavar="FACTOR", minimum=0, maximum=100,
         noun="a factor", assumed=("certain", "the host time as traced"),
         help="CPU-side time (Python, launch calls) × this factor: ~0.3 for CUDA graphs or "
         "torch.compile (or no profiler), 2 for a slower host, 0 for a GPU-bound job"),
)
# fmt: on

KNOB: dict[str, Knob] = {k.name: k for k in REGISTRY}


def knob_named(name: str) -> Knob:
    """The knob called ``name``; raises ConfigError listing the known ones."""
    try:
        return KNOB[name]
    except KeyError:
        raise ConfigError(f"unknown knob {name!r}: use one of {', '.join(KNOB)}") from None


def names(where: Callable[[Knob], bool] = lambda k: True) -> tuple[str, ...]:
    """Names of the knobs ``where`` holds for, in registry order."""
    return tuple(k.name for k in REGISTRY if where(k))


def grouped() -> list[tuple[str, list[Knob]]]:
    """The app's groups: (title, knobs) in :data:`GROUPS` order."""
    return [(g, [k for k in REGISTRY if k.group == g]) for g in GROUPS]


def traced_value(baseline: Any, name: str) -> tuple[Any, str, str]:
    """What the trace says of knob ``name`` (``baseline``: a Baseline, or None): (value, confidence,
    how it was found); confidence is "certain", "inferred", "guess" or "unknown"."""
    if baseline is None:
        return None, "unknown", ""
    k = KNOB[name]
    if k.profile_field:  # a link rate: the traced GPU's profile says it
        gpu = baseline.config.gpu_profile
        return getattr(gpu, k.profile_field) / 1e9, "inferred", f"{gpu.name} profile default"
    f = baseline.fields.get(name)
    if f is not None:
        return f.value, f.confidence, f.how
    confidence, how = k.assumed
    return getattr(baseline.config, name), confidence, how


def changed_knobs(base: Any, config: Any) -> list[str]:
    """The knobs whose value in ``config`` differs from ``base`` (two JobConfigs; a None value, an
    unknown model field, is no change)."""
    return [
        k.name
        for k in REGISTRY
        if getattr(config, k.name) is not None and getattr(config, k.name) != getattr(base, k.name)
    ]


def unmodelled_notes(changed: Sequence[str], values: dict[str, Any]) -> list[str]:
    """A note for each changed knob whose effect on time has no rule yet (``rules=()``)."""
    return [
        f"{n}={KNOB[n].text(values[n])}: no re-timing rule for this knob yet; the predicted time "
        "does not include its effect"
        for n in changed
        if n in KNOB and not KNOB[n].rules
    ]
