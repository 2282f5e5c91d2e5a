"""CUDA graph launches: one ``cudaGraphLaunch`` (or ``cuGraphLaunch``/``hipGraphLaunch``) releases
every kernel of a captured graph, and CUPTI gives each of them the launch's correlation id."""

from __future__ import annotations

import numpy as np

from lumos_core.trace.model import GPU_ACTIVITY_KINDS, RankTrace

GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})


def graph_launch_calls(t: RankTrace) -> np.ndarray:
    """Event indices of the rank's graph launch calls, in time order (graph launch #1, #2, ...)."""
    is_call = t.names_matching(lambda s: s in GRAPH_LAUNCH_CALLS)[t.name]
    calls = np.flatnonzero(is_call)
    return calls[np.argsort(t.start[calls], kind="stable")]


def graph_launch_number(t: RankTrace) -> np.ndarray:
    """Per event: N when it is a GPU activity released by the rank's graph launch #N, else -1."""
    out = np.full(len(t), -1, np.int64)
    calls = graph_launch_calls(t)
    if len(calls) == 0:
        return out
    number = np.full(len(t), -1, np.int64)
    number[calls] = np.arange(1, len(calls) + 1)
    act = np.flatnonzero(np.isin(t.kind, GPU_ACTIVITY_KINDS) & (t.launch >= 0))
    out[act] = number[t.launch[act]]
    return out
