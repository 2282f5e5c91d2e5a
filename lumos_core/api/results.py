"""What the public API returns: typed results, each with ``to_dict()`` (the very JSON object the
CLI prints with ``--json``) and ``to_pandas()`` (its main table as a DataFrame; pandas optional).
Each keeps the engine's own result as ``.result`` for what the summary leaves out (timelines, the
graph, per-task reasons)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lumos_core.api.frames import flatten, frame
from lumos_core.progress import Progress, no_progress

if TYPE_CHECKING:  # the engine's results, imported by the steps that make them
    from lumos_core.api.timing import ReplayTimes
    from lumos_core.compare.diff import JobDiff
    from lumos_core.compare.validate import Validation
    from lumos_core.replay.evaluate import HoldoutReport
    from lumos_core.replay.idle import IdleReport
    from lumos_core.replay.peer_waits import PeerWaits
    from lumos_core.replay.run import ReplayResult
    from lumos_core.replay.stragglers import StragglerReport
    from lumos_core.sweep.run import SweepReport
    from lumos_core.trace.model import Job as TracedJob
    from lumos_core.whatif.config import JobConfig
    from lumos_core.whatif.estimate import EstimateResult

BREAKDOWN = ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")


def _table(rows: list[dict[str, Any]]) -> Any:
    return frame([flatten(r) for r in rows])


@dataclass
class ReplayReport:
    """``job.replay()``: the replayed iterations beside the measured ones, and (computed when first
    read) the hold-out accuracy beside the null models; ``idle`` when asked for."""

    result: ReplayResult
    synthetic: bool
    stalls_kept: bool
    busy: bool = False
    holdout_wanted: bool | None = None  # None: on up to HOLDOUT_DEFAULT_LIMIT tasks
    holdout_cpu: str = "measured"
    idle: IdleReport | None = None
    peer_waits: PeerWaits | None = None  # collectives whose peers are not loaded, and what was done
    peer_note: str | None = None  # the sentence the CLI prints about them (None: there are none)
    other_way_error_pct: float | None = None  # the iteration error with those waits treated the other way
    traced: TracedJob | None = None  # the loaded traces (for the straggler evidence)
    times: ReplayTimes | None = None  # how long the replay took (measured by the API around it)

    @cached_property
    def stragglers(self) -> StragglerReport | None:
        """Ranks that are significantly late, with the evidence (None without the traces)."""
        from lumos_core.replay.stragglers import find_stragglers

        return find_stragglers(self.traced) if self.traced is not None else None

    @cached_property
    def holdout(self) -> HoldoutReport:
        from lumos_core.api.steps import holdout_of

        return holdout_of(self.result, self.holdout_wanted, self.holdout_cpu)

    @property
    def iteration_us(self) -> float:
        return self.result.replayed.iteration_us

    def to_dict(self) -> dict[str, Any]:
        """As ``lumos replay --json`` (``--busy``, ``--idle`` as asked)."""
        d = self.result.as_dict(include_busy=self.busy)
        if self.times is not None:  # after the graph's size, as the CLI has always printed them
            at = list(d).index("edges") + 1
            d = {**dict(list(d.items())[:at]), **self.times.as_dict(), **dict(list(d.items())[at:])}
        d["holdout"] = self.holdout.holdout_dict()
        d["null_models"] = self.holdout.null_models_dict()
        d["stalls_kept"] = self.stalls_kept
        if self.peer_waits is not None:
            d["peer_waits"] = self.peer_waits.as_dict()
            d["peer_waits"]["other_way_error_pct"] = self.other_way_error_pct
            d["peer_waits"]["note"] = self.peer_note
        d["synthetic"] = self.synthetic
        if self.stragglers is not None:
            d["stragglers"] = self.stragglers.as_dict()
        if self.idle is not None:
            d.update(self.idle.as_dict())
        return d

    def to_pandas(self) -> Any:
        """One row per rank and iteration: measured and replayed time, error, breakdowns."""
        rows = [{"rank": r.rank, **flatten(it.as_dict())} for r in self.result.ranks for it in r.iterations]
        return frame(rows)


@dataclass
class EstimateReport:
    """``job.estimate(**knobs)``: the predicted configuration beside the measured and replayed
    baseline (iteration time, breakdown, memory, what was re-timed and why)."""

    result: EstimateResult
    synthetic: bool
    stalls_kept: bool
    source: str | None = None  # the traced job's folder: :meth:`export` refuses to write inside it

    @property
    def config(self) -> JobConfig:
        """The predicted configuration."""
        return self.result.predicted.config

    @property
    def iteration_us(self) -> float:
        return self.result.predicted.iteration_us

    @property
    def notes(self) -> list[str]:
        return self.result.notes

    def to_dict(self) -> dict[str, Any]:
        """As ``lumos estimate --json`` (without ``out``: see :meth:`export`)."""
        d = self.result.as_dict()
        d["stalls_kept"] = self.stalls_kept
        d["synthetic"] = self.synthetic
        return d

    def to_pandas(self) -> Any:
        """Three rows, measured / replayed / predicted: configuration, GPUs, iteration time and
        breakdown (µs), and the predicted peak memory per GPU."""
        r = self.result
        base, pred = r.baseline.config, self.config
        rows = []
        for which, cfg, outcome in (
            ("measured", base, r.measured),
            ("replayed", base, r.replayed),
            ("predicted", pred, r.predicted),
        ):
            bd = outcome.breakdown.as_us()
            rows.append(
                {
                    "which": which,
                    "config": cfg.label(base) if which == "predicted" else "baseline",
                    "gpus": cfg.world_size,
                    "iteration_us": outcome.iteration_us,
                    **{k: bd[k] for k in BREAKDOWN},
                    "peak_memory_bytes": r.memory.peak_bytes if which == "predicted" and r.memory else None,
                }
            )
        return frame(rows)

    def export(
        self,
        out: str | Path,
        *,
        roles: dict[str, str] | None = None,
        overwrite: bool = False,
        progress: Progress = no_progress,
    ) -> Path:
        """Write the predicted timeline, one Kineto trace per rank, into folder ``out`` (``roles``:
        the traced job's process-group roles, :func:`lumos_core.whatif.baseline.group_roles`)."""
        from lumos_core.whatif.export import refuse_inside_traces, write_job

        refuse_inside_traces(out, self.source)
        r, config = self.result, self.config
        extra = {"lumos_estimate_config": config.as_dict()}
        write_job(
            r.timeline, r.represents, Path(out), r.world_size, config=config, roles=roles, extra=extra,
            progress=progress, overwrite=overwrite,
        )  # fmt: skip
        return Path(out)


@dataclass
class DiffReport:
    """``job.diff(other)``: what changed between two measured jobs (deltas are other - job)."""

    result: JobDiff

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        """As ``lumos diff --json`` (``limit``: kernel and operator rows kept)."""
        return self.result.as_dict(limit)

    def to_pandas(self, table: str = "families") -> Any:
        """One of the diff's tables: families (default), kernels, collectives, collective_kinds,
        cpu_ops, ranks or iterations."""
        d = self.result.as_dict()
        if not isinstance(d.get(table), list):
            raise KeyError(
                f"no table {table!r}: use families, kernels, collectives, collective_kinds, cpu_ops, ranks, iterations"
            )
        return _table(d[table])


@dataclass
class ValidationReport:
    """``job.validate(other)``: ``other`` predicted from this job, beside what it measured."""

    result: Validation
    sample: str  # "hold-out: ..." or "in-sample: ..." (whether a profile was fitted on other)
    synthetic: bool = False  # either job came from `lumos synth`: the error checks logic, not accuracy

    @property
    def error_pct(self) -> float:
        return self.result.error_pct

    @property
    def null_error_pct(self) -> float:
        return self.result.null_error_pct

    def to_dict(self) -> dict[str, Any]:
        """As ``lumos validate --json``."""
        return {**self.result.as_dict(), "sample": self.sample, "synthetic": self.synthetic}

    def to_pandas(self, table: str = "components") -> Any:
        """Predicted vs measured per breakdown component (default), kernel family or collective kind
        (``table="families"`` / ``"collectives"``)."""
        if table == "components":
            return frame([{"component": k, **v} for k, v in self.result.components().items()])
        rows = {"families": self.result.family_rows, "collectives": self.result.collective_rows}
        if table not in rows:
            raise KeyError(f"no table {table!r}: use components, families or collectives")
        return _table(rows[table]())


@dataclass
class IdleBreakdown:
    """``job.idle()``: every GPU stream's idle time per iteration, by cause."""

    result: IdleReport

    def to_dict(self) -> dict[str, Any]:
        """As the idle part of ``lumos replay --idle --json``."""
        return self.result.as_dict()

    def to_pandas(self) -> Any:
        """One row per rank, stream and iteration: idle time by cause (µs)."""
        return _table([r.as_dict() for r in self.result.rows])


@dataclass
class SweepTable:
    """``job.sweep(grid)``: one row per configuration (skipped ones with the reason)."""

    result: SweepReport
    out: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from lumos_core.sweep.results import row_to_dict

        self.rows = [row_to_dict(r, self.result.grid.columns) for r in self.result.rows]

    def to_dict(self) -> dict[str, Any]:
        """As ``lumos sweep --json``."""
        return {
            **self.result.as_dict(),
            "out": self.out,
            "columns": self.result.grid.columns,
            "rows": self.rows,
        }

    def to_pandas(self) -> Any:
        """One row per configuration, as the results CSV."""
        return _table(self.rows)
