"""Lumos engine: load Kineto traces, build and replay the execution graph, estimate what-ifs.

The public API (docs/api.md): ``lumos_core.open(path) -> Job``; ``job.replay()``,
``job.estimate(**knobs)``, ``job.diff(other)``, ``job.validate(other)``, ``job.idle()``,
``job.sweep(grid)``, each result with ``to_dict()`` and ``to_pandas()``. The data model (``RankTrace``,
``Kind``, ...; the loaded traces of a job are a ``TracedJob``) is exported beside it.

The command line is callable too: ``lumos_core.main(["replay", path, "--json"])`` returns its exit
code; ``lumos_core.COMMANDS`` names its commands and ``lumos_core.split_global_options(argv)`` takes
the options given before one (``--cache-max SIZE``) off an argument list.

Headless by design: nothing here imports Qt, pyqtgraph or the app. The API is imported on first use
(``lumos_core.open``), so ``import lumos_core`` and the command line start without the engine.
"""

from typing import Any

from lumos_core.errors import Cancelled, ConfigError, FolderError, GraphError, LumosError, TraceError
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.loader import discover_trace_files, load_job
from lumos_core.trace.model import CollectiveKind, Iteration, Kind, Lane, LaneRole, RankTrace
from lumos_core.trace.model import Job as TracedJob

__version__ = "0.1.0"

# names of lumos_core.api, imported when first used (PEP 562)
_API = {
    "DiffReport",
    "EstimateReport",
    "Estimator",
    "IdleBreakdown",
    "Job",
    "ReplayReport",
    "SweepTable",
    "ValidationReport",
    "open",
}


# the command line's entry points, imported when first used (the command modules are not)
_CLI = {"COMMANDS", "main", "split_global_options"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from lumos_core import api

        return getattr(api, name)
    if name in _CLI:
        from lumos_core import cli

        return getattr(cli, name)
    raise AttributeError(f"module 'lumos_core' has no attribute {name!r}")


__all__ = [
    "COMMANDS",
    "Cancelled",
    "CollectiveKind",
    "ConfigError",
    "DiffReport",
    "EstimateReport",
    "Estimator",
    "FolderError",
    "GraphError",
    "IdleBreakdown",
    "Iteration",
    "Job",
    "Kind",
    "Lane",
    "LaneRole",
    "LumosError",
    "Progress",
    "RankTrace",
    "ReplayReport",
    "SweepTable",
    "TraceError",
    "TracedJob",
    "ValidationReport",
    "discover_trace_files",
    "load_job",
    "main",
    "no_progress",
    "open",
    "split_global_options",
]
