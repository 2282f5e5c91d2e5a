"""Stage 2, the execution graph: tasks (CPU ops, GPU kernels, collective parts) and their dependencies.

``model`` holds the :class:`ExecutionGraph` type; ``build.build_graph(job)`` makes one from a loaded
job (``nodes`` picks the tasks, ``edges`` infers the dependencies, one module per family,
``calibrate`` fits the lags, ``order`` sorts the nodes, ``factory.make_graph`` assembles it; a
what-if rebuild makes one there too, with origin REBUILT and no measured times); ``export`` turns it
into networkx.
"""

from lumos_core.graph.build import build_graph
from lumos_core.graph.edges.launch import typical_launch_latency
from lumos_core.graph.factory import make_graph
from lumos_core.graph.model import NO_ANCHOR, EdgeKind, ExecutionGraph, GraphOrigin, NodeType

__all__ = [
    "NO_ANCHOR",
    "EdgeKind",
    "ExecutionGraph",
    "GraphOrigin",
    "NodeType",
    "build_graph",
    "make_graph",
    "typical_launch_latency",
]
