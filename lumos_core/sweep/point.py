"""One configuration of a sweep: :func:`estimate_point` -> :class:`GridRow`.

:func:`estimate_point` is the task every sweep engine runs (the process pool and Ray alike), a pure
function of (loaded job, its execution graph, the baseline, the changes). Its numbers are those of
``lumos estimate --json`` for the same changes; a configuration that cannot be estimated becomes a
*skipped* row with the reason instead of an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lumos_core.errors import Cancelled, LumosError
from lumos_core.graph.model import ExecutionGraph
from lumos_core.perf.profile import HardwareProfile
from lumos_core.progress import Progress, no_progress
from lumos_core.replay.breakdown import Breakdown
from lumos_core.trace.model import Job
from lumos_core.whatif.config import Baseline, problems
from lumos_core.whatif.estimate import Estimator
from lumos_core.whatif.knobs import format_changes
from lumos_core.whatif.throughput import tokens_per_iteration

OK = "ok"
SKIPPED = "skipped"
# Estimated, but the predicted peak memory exceeds the GPU: kept (with its numbers) and marked, and
# never on a Pareto front.
OUT_OF_MEMORY = "out of memory"

TOKENS_UNKNOWN = (
    "tokens/s unknown: the trace records no micro-batch size and sequence length "
    "(give them with --baseline-micro-batch and --baseline-seq)"
)


@dataclass
class GridRow:
    """What a sweep learns about one configuration (plain data: it travels back from workers)."""

    changes: dict[str, Any]
    world_size: int
    status: str  # OK, OUT_OF_MEMORY or SKIPPED
    iteration_us: float = math.nan
    breakdown: Breakdown | None = None
    change_pct: float = math.nan  # vs the replayed baseline
    tokens_per_s_per_gpu: float = math.nan
    mfu: float = math.nan  # model FLOPs utilisation, a fraction of the bf16 peak (whatif/throughput.py)
    note: str = ""  # why it was skipped, or why tokens/s is unknown
    seconds: float = 0.0  # estimate time (not written to results files: it varies run to run)
    notes: list[str] = field(default_factory=list)  # the estimate's own notes
    peak_memory_bytes: int = -1  # predicted peak per GPU (-1 unknown)
    capacity_bytes: int = -1  # the GPU's memory
    # share of the traced iteration the host sets when it hid this GPU what-if (NaN: not CPU-paced);
    # not written to results files, like ``notes``
    cpu_paced: float = math.nan

    @property
    def ok(self) -> bool:
        """Estimated and fits in memory (a candidate for the Pareto front)."""
        return self.status == OK

    @property
    def estimated(self) -> bool:
        """Has predicted numbers (fits in memory or not)."""
        return self.status in (OK, OUT_OF_MEMORY)

    @property
    def fits(self) -> bool | None:
        if self.peak_memory_bytes < 0 or self.capacity_bytes <= 0:
            return None
        return self.peak_memory_bytes <= self.capacity_bytes

    @property
    def key(self) -> str:
        return point_key(self.changes)

    def same_numbers(self, other: GridRow) -> bool:
        """Equal configuration and results (NaN equal to NaN); run times left out."""

        def eq(a: float, b: float) -> bool:
            return (math.isnan(a) and math.isnan(b)) or a == b

        return (
            self.changes == other.changes
            and self.world_size == other.world_size
            and self.status == other.status
            and eq(self.iteration_us, other.iteration_us)
            and self.breakdown == other.breakdown
            and eq(self.change_pct, other.change_pct)
            and eq(self.tokens_per_s_per_gpu, other.tokens_per_s_per_gpu)
            and eq(self.mfu, other.mfu)
            and self.note == other.note
            and self.peak_memory_bytes == other.peak_memory_bytes
            and self.capacity_bytes == other.capacity_bytes
        )


def point_key(changes: dict[str, Any]) -> str:
    """The text that names a configuration in a results file (``dp=16,gpu=A100``)."""
    return format_changes(changes) or "baseline"


def skipped_row(baseline: Baseline, changes: dict[str, Any], reason: str) -> GridRow:
    config = baseline.config.with_changes(**changes)
    return GridRow(dict(changes), config.world_size, SKIPPED, note=reason)


def estimate_point(
    job: Job,
    graph: ExecutionGraph,
    baseline: Baseline,
    changes: dict[str, Any],
    progress: Progress = no_progress,
    profile: HardwareProfile | None = None,
    estimator: Estimator | None = None,
) -> GridRow:
    """Estimate ``changes`` (see the module docstring). Cancelled still propagates. ``estimator``:
    the job's, kept across the points of a sweep (the traced configuration is replayed once)."""
    config = baseline.config.with_changes(**changes)
    found = problems(config, baseline)
    if found:
        return skipped_row(baseline, changes, "; ".join(found))
    estimator = estimator or Estimator(job, baseline=baseline, graph=graph, profile=profile)
    try:
        r = estimator.estimate(config, progress=progress)
    except Cancelled:
        raise
    except LumosError as exc:  # valid on paper, but this trace cannot support it (e.g. no layers)
        return skipped_row(baseline, changes, str(exc))
    pred, rep = r.predicted.iteration_us, r.replayed.iteration_us
    tokens = tokens_per_iteration(config)
    per_gpu = math.nan
    if tokens is not None and pred > 0:
        per_gpu = tokens / (pred / 1e6) / r.world_size
    status, note = OK, "" if tokens is not None else TOKENS_UNKNOWN
    peak = cap = -1
    if r.memory is not None:
        peak, cap = r.memory.peak_bytes, r.memory.capacity_bytes
        if not r.memory.fits:
            status = OUT_OF_MEMORY
            note = (
                f"out of memory: predicted peak {peak / 2**30:,.1f} GiB per GPU > {r.memory.gpu} "
                f"{cap / 2**30:,.1f} GiB"
            )
    return GridRow(
        changes=dict(changes),
        world_size=r.world_size,
        status=status,
        iteration_us=pred,
        breakdown=r.predicted.breakdown,
        change_pct=100.0 * (pred / rep - 1) if rep else 0.0,
        tokens_per_s_per_gpu=per_gpu,
        mfu=r.throughput.mfu if r.throughput is not None else math.nan,
        note=note,
        seconds=r.seconds,
        notes=list(r.notes),
        peak_memory_bytes=peak,
        capacity_bytes=cap,
        cpu_paced=math.nan if r.cpu_paced is None else r.cpu_paced,
    )
