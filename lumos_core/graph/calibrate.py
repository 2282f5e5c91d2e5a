"""Lag calibration: lags are calibrated so that replaying the unmodified graph reproduces the measured start of every
task: an edge that would force a task later than it was measured is tightened, and a delay no edge
explains (work outside the trace) is attached to the task's binding edge and counted
(``unexplained_ns``) so the quality of the graph is visible.
"""

from __future__ import annotations

import numpy as np

from lumos_core.graph import kernels
from lumos_core.graph.model import NO_ANCHOR, NodeType

BLOCKING_FLOOR_NS = 5_000  # what a synchronize costs when it does not have to wait


def calibrate_start_lags(
    node: dict[str, np.ndarray],
    src: np.ndarray,
    dst: np.ndarray,
    lag: np.ndarray,
    from_end: np.ndarray,
    anchor: np.ndarray,
    absorb: bool,
) -> tuple[np.ndarray, int]:
    """Make every task's dependencies reproduce its measured start (see the module docstring).

    Runs the compiled passes (:func:`lumos_core.graph.kernels.calibrate_start`): at millions of
    edges the numpy form's dozen edge-sized temporaries cost more (fresh pages each) than the
    arithmetic. The tests compare it with a numpy form (tests/kernel_references.py)."""
    if len(src) == 0:
        return lag, 0
    out, delay = kernels.calibrate_start(
        np.ascontiguousarray(src, np.int32),
        np.ascontiguousarray(dst, np.int32),
        np.ascontiguousarray(lag, np.int64),
        np.ascontiguousarray(from_end, bool),
        np.ascontiguousarray(node["ms"], np.int64),
        np.ascontiguousarray(node["me"], np.int64),
        np.ascontiguousarray(anchor, np.int64),
        int(NO_ANCHOR),
        bool(absorb),
    )
    return out, int(delay[node["type"] != NodeType.CPU].sum())


def calibrate_end_lags(
    node: dict[str, np.ndarray], src: np.ndarray, dst: np.ndarray, lag: np.ndarray, from_end: np.ndarray
) -> np.ndarray:
    """A blocking call returns a few µs after what it waited for. For the dependency that was met
    last (the binding one) that is the measured return latency, and the call's own duration shrinks
    to a small floor, so it ends earlier when the GPU gets faster. Other dependencies, met before the
    call started, get the typical return latency, never more than measured."""
    if len(src) == 0:
        return lag
    me, ms = node["me"], node["ms"]
    t_src = np.where(from_end, me[src], ms[src])
    ret = me[dst] - t_src
    latest = np.full(len(node["dur"]), np.iinfo(np.int64).min)
    np.maximum.at(latest, dst, t_src)
    binding = t_src == latest[dst]
    blocked = binding & (t_src > ms[dst])  # not met when the call started: the call waited
    typical = int(np.median(ret[blocked])) if blocked.any() else 5_000
    typical = max(0, min(typical, 50_000))
    lag = np.where(blocked, ret, np.minimum(ret, typical))
    waited = np.unique(dst[blocked])
    node["dur"][waited] = np.minimum(node["dur"][waited], BLOCKING_FLOOR_NS)
    return lag
