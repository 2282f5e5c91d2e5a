"""Stage 2, the execution graph: tasks (CPU ops, GPU kernels, collective parts) and their dependencies.

``build.build_graph(job)`` makes an :class:`ExecutionGraph` from a loaded job; ``export`` turns it into
networkx for analysis.
"""

from lumos_core.graph.build import (
    NO_ANCHOR,
    EdgeKind,
    ExecutionGraph,
    NodeType,
    build_graph,
    typical_launch_latency,
)

__all__ = ["NO_ANCHOR", "EdgeKind", "ExecutionGraph", "NodeType", "build_graph", "typical_launch_latency"]
