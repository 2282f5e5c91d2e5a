"""Old home of the pipeline schedules: they now live in :mod:`lumos_core.perf.schedules`, below
both ``synth`` and ``whatif``, so the synthetic generator no longer imports upward. This module
re-exports them for existing callers."""

from lumos_core.perf.schedules import (
    P2P,
    SCHEDULES,
    Step,
    format_schedule,
    pipeline_steps,
    schedule,
    warmup_count,
)

__all__ = ["P2P", "SCHEDULES", "Step", "format_schedule", "pipeline_steps", "schedule", "warmup_count"]
