"""What-if changes as text: ``"dp=16,gpu=H200"`` <-> ``{"dp": 16, "gpu": "H200"}``.

The knob names are those of :data:`lumos_core.whatif.config.KNOBS` (the fields of :class:`JobConfig` a
user may change). The app's ``--estimate`` option, saved sessions and sweeps all go through
:func:`parse_changes` / :func:`coerce_changes`, so a value means the same everywhere and a typo
is an error that names the knob, not a silent no-op.
"""

from __future__ import annotations

from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.whatif.config import KNOBS

# The job's structure: parallelism, pipeline and model shape (whole numbers). ``lumos estimate``
# takes each as an integer option; ``lumos diff`` compares them between two jobs.
STRUCTURE_KNOBS = (
    "dp",
    "tp",
    "pp",
    "microbatches",
    "layers",
    "hidden",
    "ffn",
    "heads",
    "seq",
    "micro_batch",
)
INT_KNOBS = (*STRUCTURE_KNOBS, "zero")
FLOAT_KNOBS = ("nvlink_gbps", "network_gbps", "cpu_scale")
TEXT_KNOBS = ("schedule", "gpu", "recompute")

# Baseline values a user may give when the trace cannot tell them (as ``lumos estimate
# --baseline-<knob>``): model shape and pipeline structure, never the parallelism it was run with.
OVERRIDABLE = ("layers", "hidden", "ffn", "heads", "seq", "micro_batch", "microbatches")


def coerce_value(knob: str, value: Any) -> Any:
    """``value`` (text or number) as the type of ``knob``; raises ConfigError naming the knob."""
    if knob not in KNOBS:
        raise ConfigError(f"unknown knob {knob!r}: use one of {', '.join(KNOBS)}")
    if value is None:
        return None
    if knob in INT_KNOBS:
        if isinstance(value, bool):
            raise ConfigError(f"{knob} must be a whole number, not {value!r}")
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"{knob} must be a whole number, not {value!r}")
            return int(value)
        if isinstance(value, int):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise ConfigError(f"{knob} must be a whole number, not {value!r}") from None
    if knob in FLOAT_KNOBS:
        try:
            return float(value)
        except (TypeError, ValueError):
            unit = "a factor" if knob == "cpu_scale" else "a number (GB/s)"
            raise ConfigError(f"{knob} must be {unit}, not {value!r}") from None
    return str(value).strip()


def coerce_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """Every value of ``changes`` typed for its knob (None values dropped)."""
    out = {}
    for k, v in changes.items():
        typed = coerce_value(k, v)
        if typed is not None:
            out[k] = typed
    return out


def parse_changes(text: str) -> dict[str, Any]:
    """``"dp=16, gpu=H200"`` -> ``{"dp": 16, "gpu": "H200"}``. Raises ConfigError on bad input."""
    out: dict[str, Any] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        knob, sep, value = item.partition("=")
        knob = knob.strip().replace("-", "_")
        if not sep or not knob or not value.strip():
            raise ConfigError(f"{item!r}: expected KNOB=VALUE, e.g. dp=16 (knobs: {', '.join(KNOBS)})")
        out[knob] = coerce_value(knob, value)
    if not out:
        raise ConfigError(f"{text!r}: no change given, expected KNOB=VALUE[,KNOB=VALUE]")
    return out


def format_changes(changes: dict[str, Any]) -> str:
    """The inverse of :func:`parse_changes` (knobs in :data:`KNOBS` order)."""
    return ",".join(
        f"{k}={changes[k]:g}" if isinstance(changes[k], float) else f"{k}={changes[k]}"
        for k in KNOBS
        if k in changes
    )
