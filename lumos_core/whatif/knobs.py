"""What-if changes as text: ``"dp=16,gpu=H200"`` <-> ``{"dp": 16, "gpu": "H200"}``.

The knobs and their types are those of the registry (:mod:`lumos_core.whatif.knob_registry`).
The app's ``--estimate`` option, saved sessions and sweeps all go through
:func:`parse_changes` / :func:`coerce_changes`, so a value means the same everywhere and a typo
is an error that names the knob, not a silent no-op.
"""

from __future__ import annotations

from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.whatif.knob_registry import KNOB, REGISTRY, knob_named, names

# Views of the registry that other modules name. The job's structure: parallelism, pipeline and
# model shape (whole numbers); ``lumos diff`` and ``lumos validate`` compare them between two jobs.
STRUCTURE_KNOBS = names(lambda k: k.shape)
INT_KNOBS = names(lambda k: k.type is int)
FLOAT_KNOBS = names(lambda k: k.type is float)
TEXT_KNOBS = names(lambda k: k.type is str)
BOOL_KNOBS = names(lambda k: k.type is bool)

# Baseline values a user may give when the trace cannot tell them (as ``lumos estimate
# --baseline-<knob>``): model shape and pipeline structure, never the parallelism it was run with.
OVERRIDABLE = names(lambda k: k.overridable)


def coerce_value(name: str, value: Any) -> Any:
    """``value`` (text or number) as the type of knob ``name``; raises ConfigError naming the knob."""
    return knob_named(name).coerce(value)


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
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name or not value.strip():
            raise ConfigError(f"{item!r}: expected KNOB=VALUE, e.g. dp=16 (knobs: {', '.join(KNOB)})")
        out[name] = coerce_value(name, value)
    if not out:
        raise ConfigError(f"{text!r}: no change given, expected KNOB=VALUE[,KNOB=VALUE]")
    return out


def format_changes(changes: dict[str, Any]) -> str:
    """The inverse of :func:`parse_changes` (knobs in registry order)."""
    return ",".join(f"{k.name}={k.text(changes[k.name])}" for k in REGISTRY if k.name in changes)
