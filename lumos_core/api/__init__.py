"""The public Python API of Lumos (see docs/api.md):

    import lumos_core
    job = lumos_core.open("traces/")            # a Job: loaded traces, graph and baseline on demand
    job.replay().to_dict()                       # == lumos replay --json
    job.estimate(dp=16).to_pandas()              # measured / replayed / predicted
    job.diff(other), job.validate(other), job.idle(), job.sweep("dp=8,16 pp=1,2")

Every result has ``to_dict()`` (the JSON the CLI prints with ``--json``) and ``to_pandas()``
(pandas optional). The CLI commands and the app call this API.

Front ends that show a job step by step (the app) also use the modules beside this one: ``loading``
(load, warm up, build the graph, with progress), ``knobs`` (the registry, configurations, GPUs),
``scenarios`` (what-if runs summarised for display), ``sweep`` (grids and engines) and ``views``
(read-only summaries of loaded traces); see docs/api.md.
"""

from typing import Any

from lumos_core.api.job import Job, open
from lumos_core.api.results import (
    DiffReport,
    EstimateReport,
    IdleBreakdown,
    ReplayReport,
    SweepTable,
    ValidationReport,
)


def __getattr__(name: str) -> Any:  # the what-if engine's names, imported when first used
    if name == "Estimator":
        from lumos_core.whatif.estimate import Estimator

        return Estimator
    if name == "KNOBS":
        from lumos_core.whatif.knob_registry import REGISTRY

        return REGISTRY
    raise AttributeError(f"module 'lumos_core.api' has no attribute {name!r}")


__all__ = [
    "KNOBS",
    "DiffReport",
    "EstimateReport",
    "Estimator",
    "IdleBreakdown",
    "Job",
    "ReplayReport",
    "SweepTable",
    "ValidationReport",
    "open",
]
