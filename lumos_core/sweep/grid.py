"""A grid of what-if knobs: ``"dp=8,16,32,64 pp=1,2,4 microbatches=4,8,16"`` -> one change set per
combination (the Cartesian product, first knob slowest).

Knob names are those of the registry (:mod:`lumos_core.whatif.knob_registry`; ``-`` may stand for
``_``); values are typed by their knob (:func:`lumos_core.whatif.knobs.coerce_value`), so ``dp=8.5``
or ``gpu=`` fail here, naming the knob, before anything runs. An integer knob also takes a range of
powers of two, ``dp=8-512`` (:func:`parse_values`, :func:`default_values`). Knob specs are separated by spaces or ``;``; a value
list may contain spaces (``dp=8, 16``). A one-knob sweep is a one-axis grid (:func:`axis_grid`).

Whether a combination can be estimated is a separate question (:func:`invalid_reason`): the grid
keeps every combination and the sweep records the invalid ones as skipped, with the reason.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

from lumos_core.errors import ConfigError
from lumos_core.whatif.config import Baseline, problems
from lumos_core.whatif.knob_registry import AROUND, CHOICES, KNOB, POWERS, knob_named
from lumos_core.whatif.knobs import coerce_value, format_changes

_SPEC_SEPARATORS = re.compile(r"[\s;]+")


@dataclass(frozen=True)
class Grid:
    """Swept knobs (name -> values, in the order given) and knobs held at one value for every point."""

    knobs: dict[str, list[Any]]
    fixed: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.knobs.values())

    @property
    def columns(self) -> list[str]:
        """Every knob a point sets, in registry order (the results table has one column each)."""
        names = set(self.knobs) | set(self.fixed)
        return [k for k in KNOB if k in names]

    def points(self) -> list[dict[str, Any]]:
        """One change set per combination, the fixed knobs included."""
        names = list(self.knobs)
        return [
            {**self.fixed, **dict(zip(names, combo))}
            for combo in itertools.product(*(self.knobs[k] for k in names))
        ]

    def describe(self) -> str:
        swept = " ".join(f"{k}={','.join(_text(v) for v in vs)}" for k, vs in self.knobs.items())
        fixed = f" (fixed: {format_changes(self.fixed)})" if self.fixed else ""
        return f"{swept}{fixed}: {self.size} configuration(s)"


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def default_values(name: str, current: Any, limit: int = 512) -> list[Any]:
    """A sensible range for knob ``name`` around its baseline value ``current`` (as the registry
    says: :attr:`~lumos_core.whatif.knob_registry.Knob.suggest`): powers of two from the current
    value up to ``limit`` for parallelism (DP 8 -> 8, 16, ..., 512), halves and doubles for model
    sizes, every choice for the GPU."""
    k = knob_named(name)
    if k.suggest == POWERS:
        start = max(int(current or 1), 1)
        out = []
        v = start
        while v <= limit and len(out) < 12:
            out.append(v)
            v *= 2
        return out
    if k.suggest == AROUND and current:
        c = int(current)
        return sorted({max(1, c // 2), c, c * 2, c * 4})
    if k.suggest == CHOICES:
        return k.values()
    return [current] if current is not None else []


def parse_values(name: str, text: str) -> list[Any]:
    """``"8, 16, 32"`` (or ``"8-512"`` for powers of two) as typed values of knob ``name``."""
    text = text.strip()
    if "-" in text and "," not in text and knob_named(name).type is int:
        lo, _, hi = text.partition("-")
        lo_v, hi_v = coerce_value(name, lo), coerce_value(name, hi)
        return default_values(name, lo_v, limit=hi_v)
    return [coerce_value(name, v) for v in text.split(",") if v.strip()]


def parse_grid(text: str, fixed: dict[str, Any] | None = None) -> Grid:
    """``"dp=8,16 pp=1,2"`` as a :class:`Grid` (raises ConfigError naming what is wrong)."""
    specs: dict[str, list[str]] = {}
    current: str | None = None
    for token in _SPEC_SEPARATORS.split(text.strip()):
        if not token:
            continue
        knob, sep, values = token.partition("=")
        if not sep:  # "dp=8, 16": a value of the knob before
            if current is None:
                raise ConfigError(f"grid {text!r}: {token!r} is not KNOB=VALUES (e.g. dp=8,16,32)")
            specs[current].append(token)
            continue
        current = knob.strip().replace("-", "_")
        if current not in KNOB:
            raise ConfigError(f"grid: unknown knob {knob!r}: use one of {', '.join(KNOB)}")
        if current in specs:
            raise ConfigError(
                f"grid: {current} is given twice; list all its values once (e.g. {current}=1,2)"
            )
        specs[current] = [values]
    if not specs:
        raise ConfigError(f'grid {text!r}: nothing to sweep; expected e.g. "dp=8,16,32 pp=1,2"')
    knobs: dict[str, list[Any]] = {}
    for knob, parts in specs.items():
        values = parse_values(knob, ",".join(p for p in parts if p.strip(",")))
        if not values:
            raise ConfigError(f"grid: {knob} has no values; expected e.g. {knob}=1,2")
        knobs[knob] = list(dict.fromkeys(values))  # a value given twice is one configuration
    fixed = {k: coerce_value(k, v) for k, v in (fixed or {}).items() if v is not None}
    both = sorted(set(fixed) & set(knobs))
    if both:
        raise ConfigError(f"{', '.join(both)} both swept in the grid and fixed; give it in one place only")
    return Grid(knobs, fixed)


def axis_grid(knob: str, values: list[Any], fixed: dict[str, Any] | None = None) -> Grid:
    """A one-knob sweep as the grid it is: one axis, ``knob`` over ``values`` (typed, in the order
    given), the ``fixed`` knobs held."""
    typed = {k: coerce_value(k, v) for k, v in (fixed or {}).items() if v is not None and k != knob}
    return Grid({knob: [coerce_value(knob, v) for v in values]}, typed)


def invalid_reason(baseline: Baseline, changes: dict[str, Any]) -> str:
    """Why ``changes`` cannot be estimated from ``baseline`` ("" when it can)."""
    return "; ".join(problems(baseline.config.with_changes(**changes), baseline))
