"""What a re-timing produces: per-node duration ratios and the rules behind them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Retiming:
    """A group of tasks re-timed the same way (reported to the user)."""

    what: str
    model: str
    count: int = 0
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"what": self.what, "model": self.model, "count": self.count, "detail": self.detail}


@dataclass
class RetimePlan:
    """Per-node duration ratios and, per node, the index of the Retiming that set it (-1: none);
    ``lag_ratio`` scales same-thread lags (CPU time between tasks, on CPU-only traces)."""

    ratio: np.ndarray
    why: np.ndarray
    rules: list[Retiming] = field(default_factory=list)
    lag_ratio: np.ndarray | None = None

    @classmethod
    def identity(cls, n: int) -> RetimePlan:
        return cls(np.ones(n), np.full(n, -1, np.int32))

    def apply(
        self, nodes: np.ndarray, ratio: np.ndarray | float, what: str, model: str, detail: str = ""
    ) -> None:
        """Multiply the ratio of ``nodes`` and attribute them to a (shared) rule."""
        nodes = np.asarray(nodes, np.int64)
        if len(nodes) == 0:
            return
        key = (what, model, detail)
        for i, r in enumerate(self.rules):
            if (r.what, r.model, r.detail) == key:
                idx = i
                break
        else:
            idx = len(self.rules)
            self.rules.append(Retiming(what, model, 0, detail))
        self.ratio[nodes] *= ratio
        self.why[nodes] = idx
        self.rules[idx].count += len(nodes)
