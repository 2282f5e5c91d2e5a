"""How long a replay took, measured here around the engine's steps: the engine's functions time
nothing themselves (a timer inside a pipeline function is a benchmark's hook in the product), and
the seconds ``lumos replay`` prints are the API's own measurement of the calls it made."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lumos_core.graph.model import ExecutionGraph
from lumos_core.progress import Progress, no_progress
from lumos_core.replay.run import ReplayResult, compare_replay, simulation_durations
from lumos_core.replay.simulate import simulate
from lumos_core.trace.model import Job as TracedJob


@dataclass(frozen=True)
class ReplayTimes:
    """Wall seconds of one replay: in all (from the simulation's set-up to the compared result,
    the graph already built) and of the simulation alone, over ``nodes`` graph nodes."""

    seconds: float
    simulate_seconds: float
    nodes: int

    def as_dict(self) -> dict[str, Any]:
        """The timing fields of ``lumos replay --json``."""
        return {
            "seconds": round(self.seconds, 4),
            "simulate_seconds": round(self.simulate_seconds, 4),
            "tasks_per_second": round(self.nodes / max(self.simulate_seconds, 1e-9)),
        }


def timed_replay(
    data: TracedJob,
    graph: ExecutionGraph,
    scale: dict[str, float],
    progress: Progress = no_progress,
) -> tuple[ReplayResult, ReplayTimes]:
    """:func:`lumos_core.replay.run.replay` of a built ``graph``, step by step, with the time of
    each step."""
    t0 = time.perf_counter()
    dur = simulation_durations(graph, scale, progress)
    t1 = time.perf_counter()
    start, end = simulate(graph, dur)
    simulated = time.perf_counter() - t1
    del dur  # before the comparison allocates its own arrays
    result = compare_replay(data, graph, start, end, scale=scale, progress=progress)
    return result, ReplayTimes(time.perf_counter() - t0, simulated, graph.n_nodes)
