"""Lumos engine: load Kineto traces, build and replay the execution graph, estimate what-ifs.

Headless by design: nothing here imports Qt, pyqtgraph or the app.
"""

from lumos_core.errors import Cancelled, ConfigError, FolderError, GraphError, LumosError, TraceError
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.loader import discover_trace_files, load_job
from lumos_core.trace.model import CollectiveKind, Iteration, Job, Kind, Lane, LaneRole, RankTrace

__version__ = "0.1.0"

__all__ = [
    "Cancelled",
    "CollectiveKind",
    "ConfigError",
    "FolderError",
    "GraphError",
    "Iteration",
    "Job",
    "Kind",
    "Lane",
    "LaneRole",
    "LumosError",
    "Progress",
    "RankTrace",
    "TraceError",
    "discover_trace_files",
    "load_job",
    "no_progress",
]
