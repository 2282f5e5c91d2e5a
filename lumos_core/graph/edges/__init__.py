"""The dependency rules: one module per family of :class:`~lumos_core.graph.model.EdgeKind`.

A per-rank rule is a function of a :class:`RankContext` that appends edges to its start or end
dependency list; :data:`RANK_RULES` lists them in the order :func:`~lumos_core.graph.build.build_graph`
runs them (the order fixes the order of each node's edges, which decides ties between equally
binding dependencies, so append new rules at the end). Collectives join ranks and add nodes, so
:func:`collective_joins` runs once after every rank's tasks exist.

To add a dependency family: add an ``EdgeKind`` (and its label) in ``graph/model.py``, write
``graph/edges/<family>.py`` with an ``add_<family>(ctx)`` function, and append it to ``RANK_RULES``.
"""

from __future__ import annotations

from collections.abc import Callable

from lumos_core.graph.edges.collectives import collective_joins
from lumos_core.graph.edges.cross_thread import add_cross_thread
from lumos_core.graph.edges.edge_list import EdgeList, RankContext
from lumos_core.graph.edges.event_wait import add_event_waits
from lumos_core.graph.edges.graph_launch import add_graph_order
from lumos_core.graph.edges.launch import add_launches, typical_launch_latency
from lumos_core.graph.edges.launch_queue import add_launch_queue
from lumos_core.graph.edges.program_order import add_program_order
from lumos_core.graph.edges.sync import add_syncs

RankRule = Callable[[RankContext], None]

RANK_RULES: tuple[RankRule, ...] = (
    add_program_order,  # CPU_THREAD, STREAM
    add_launches,  # LAUNCH
    add_cross_thread,  # CPU_CROSS
    add_syncs,  # SYNC (end dependencies)
    add_launch_queue,  # LAUNCH_QUEUE (end dependencies)
    add_event_waits,  # EVENT_WAIT
    add_graph_order,  # GRAPH (kernels of one CUDA graph launch across streams)
)

__all__ = [
    "RANK_RULES",
    "EdgeList",
    "RankContext",
    "RankRule",
    "collective_joins",
    "typical_launch_latency",
]
