"""``lumos validate A B``: predict measured job B from job A and say how wrong the prediction is.

The configurations of both jobs are inferred; the knobs that differ become the what-if, and
:func:`lumos_core.whatif.estimate.estimate` predicts it from A exactly as ``lumos estimate`` would.
The prediction and B are then measured the same way (steady-state iterations, breakdown, time per
kernel family and collective kind), so the error says which model was wrong and by how much.

Beside every error stands the null model "B takes as long as A" (no prediction at all): a
prediction is only worth something where it beats that.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumos_core.compare.diff import JobDiff, JobSide, PairError, compare_sides, job_side
from lumos_core.compare.summary import JobSummary, Stat, pct_change, summarize
from lumos_core.errors import ConfigError
from lumos_core.perf.hardware import get_gpu
from lumos_core.perf.profile import HardwareProfile
from lumos_core.progress import Progress, no_progress
from lumos_core.trace.model import Job
from lumos_core.whatif.config import check
from lumos_core.whatif.estimate import EstimateResult, Estimator, estimate, outcome_of
from lumos_core.whatif.knobs import STRUCTURE_KNOBS
from lumos_core.whatif.scenario import ScenarioSummary, summarize_estimate

# Knobs that ``lumos estimate`` models: the job's structure (the device is modelled as the ``gpu``
# knob when both devices are known GPU profiles).
MODELLED = STRUCTURE_KNOBS
# Kernels only one job runs (by name, shapes pooled) above this share of its work mean different
# code or a different model, which no knob explains.
UNEXPLAINED_SHARE = 0.25
_BD = (
    ("exposed_compute", "exposed_compute_us"),
    ("overlapped", "overlapped_us"),
    ("exposed_comm", "exposed_comm_us"),
    ("idle", "other_us"),
)


@dataclass
class Validation:
    pair: JobDiff
    changes: dict[str, Any]  # the what-if: knob -> B's value
    unmodelled: dict[str, list[Any]]  # knobs that differ and that Lumos cannot model
    result: EstimateResult
    predicted: JobSummary
    measured_us: float
    measured_breakdown: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def predicted_us(self) -> float:
        return self.result.predicted.iteration_us

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_us / self.measured_us - 1.0) if self.measured_us else 0.0

    @property
    def null_us(self) -> float:
        """The null model's prediction: B takes what A took (measured)."""
        return self.result.measured.iteration_us

    @property
    def null_error_pct(self) -> float:
        return 100.0 * (self.null_us / self.measured_us - 1.0) if self.measured_us else 0.0

    def components(self) -> dict[str, dict[str, float | None]]:
        pred = self.result.predicted.breakdown.as_us()
        out = {}
        for name, key in _BD:
            p, m = pred[key], self.measured_breakdown[key]
            out[name] = {
                "predicted_us": round(p, 3),
                "measured_us": round(m, 3),
                "error_us": round(p - m, 3),
                "error_pct": pct_change(p, m),
            }
        return out

    def family_rows(self) -> list[dict[str, Any]]:
        return _rows(self.predicted.families, self.pair.b.summary.families, "family")

    def collective_rows(self) -> list[dict[str, Any]]:
        return _rows(self.predicted.collectives_by_kind(), self.pair.b.summary.collectives_by_kind(), "kind")

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.pair.a.path,
            "b": self.pair.b.path,
            "differing_knobs": self.pair.differing_knobs,
            "modelled_knobs": self.changes,
            "unmodelled_knobs": self.unmodelled,
            "predicted_us": round(self.predicted_us, 3),
            "measured_us": round(self.measured_us, 3),
            "error_pct": round(self.error_pct, 3),
            "null_model": "B takes as long as A (measured A iteration)",
            "null_us": round(self.null_us, 3),
            "null_error_pct": round(self.null_error_pct, 3),
            "components": self.components(),
            "families": self.family_rows(),
            "collectives": self.collective_rows(),
            "estimate": self.result.as_dict(),
            "notes": self.notes,
        }


def _rows(pred: dict[str, Any], meas: dict[str, Any], key: str) -> list[dict[str, Any]]:
    rows = []
    for k in set(pred) | set(meas):
        p = pred.get(k, Stat()).total_us
        m = meas.get(k, Stat()).total_us
        rows.append(
            {
                key: k,
                "predicted_us": round(p, 3),
                "measured_us": round(m, 3),
                "error_us": round(p - m, 3),
                "error_pct": pct_change(p, m),
            }
        )
    rows.sort(key=lambda r: -max(r["predicted_us"], r["measured_us"]))
    return rows


def plan_changes(pair: JobDiff) -> tuple[dict[str, Any], dict[str, list[Any]], list[str]]:
    """(knob -> B's value for the what-if, knobs Lumos cannot model, notes)."""
    changes: dict[str, Any] = {}
    unmodelled: dict[str, list[Any]] = {}
    notes: list[str] = []
    for k, (va, vb) in sorted(pair.differing_knobs.items()):
        if k in MODELLED:
            if va is None:
                raise PairError(
                    f"{k} differs but A's value is not recorded in its trace: give it with "
                    f"--baseline-{k.replace('_', '-')} N"
                )
            if vb is None:
                raise PairError(
                    f"{k} differs but B's value is not recorded in its trace: give it with "
                    f"--{k.replace('_', '-')} N"
                )
            changes[k] = vb
        elif k == "device":
            gpu = _gpu_profile(vb)
            if gpu and _gpu_profile(va):
                changes["gpu"] = gpu
            else:
                unmodelled[k] = [va, vb]
        elif k == "world_size":
            unmodelled[k] = [va, vb]
        else:
            unmodelled[k] = [va, vb]
    return changes, unmodelled, notes


def _gpu_profile(device: Any) -> str | None:
    try:
        return get_gpu(str(device)).name
    except ConfigError:
        return None


def unexplained_code(a: JobSide, b: JobSide) -> list[str]:
    """Why the two jobs look like different code or models (empty when they do not)."""
    out = []
    na, nb = a.summary.names, b.summary.names
    if a.device != b.device:  # libraries pick other kernels on another GPU: compare families
        na, nb = a.summary.families, b.summary.families
    for side, mine, other, what in ((a, na, nb, "A"), (b, nb, na, "B")):
        total = sum(s.total_us for s in mine.values())
        only = {k: s.total_us for k, s in mine.items() if k not in other}
        share = sum(only.values()) / total if total else 0.0
        if share > UNEXPLAINED_SHARE:
            top = sorted(only, key=lambda k: -only[k])[:3]
            out.append(
                f"{100 * share:.0f}% of {what}'s work ({side.path}) is in kernels/operators the other "
                f"job never runs (e.g. {', '.join(t[:60] for t in top)})"
            )
    return out


def validate_jobs(
    job_a: Job,
    job_b: Job,
    *,
    overrides_a: dict[str, Any] | None = None,
    overrides_b: dict[str, Any] | None = None,
    force: bool = False,
    progress: Progress = no_progress,
    profile: HardwareProfile | None = None,
    estimator: Estimator | None = None,
) -> Validation:
    """Predict ``job_b`` from ``job_a`` (see the module docstring). Raises PairError for pairs that
    cannot be validated: one job CPU-only, ranks missing, different code no knob explains.
    ``estimator``: job A's, when the caller keeps one (its baseline inferred with ``overrides_a``)."""
    a = job_side(job_a, overrides_a)
    b = job_side(job_b, overrides_b)
    pair = compare_sides(a, b)
    for s, name in ((a, "A"), (b, "B")):
        if s.missing_ranks:
            raise PairError(
                f"{name} ({s.path}) holds {len(s.ranks)} of its {s.world_size} ranks (missing "
                f"{', '.join(map(str, s.missing_ranks[:8]))}{', ...' if len(s.missing_ranks) > 8 else ''}): "
                "a prediction from, or a check against, an incomplete job would not be the job's"
            )
    code = unexplained_code(a, b)
    if code and not force:
        raise PairError(
            "the jobs look like different code or models, which no knob explains: "
            + "; ".join(code)
            + (
                f" (knobs that differ: {', '.join(sorted(pair.differing_knobs))})"
                if pair.differing_knobs
                else ""
            )
            + "; use lumos diff to see what changed, or --force to predict anyway"
        )
    changes, unmodelled, notes = plan_changes(pair)
    if unmodelled and not changes and not force:
        raise PairError(
            "only knobs Lumos cannot model differ ("
            + ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in unmodelled.items())
            + "); use --force to compare B with A replayed as it is"
        )
    notes += [f"not modelled: {k} {v[0]} -> {v[1]} (the prediction keeps A's)" for k, v in unmodelled.items()]
    notes += [f"different code: {c}" for c in code]
    config = a.baseline.config.with_changes(**changes)
    check(config, a.baseline)
    if estimator is not None and estimator.job is job_a and estimator.baseline.config == a.baseline.config:
        result = estimator.estimate(config, progress=progress)
    else:
        result = estimate(job_a, config, baseline=a.baseline, progress=progress, profile=profile)
    predicted = summarize(result.timeline, "predicted", gpu=a.summary.gpu, shapes=False)
    measured = outcome_of(b.baseline.config, job_b.ranks)
    notes += list(pair.notes)
    return Validation(
        pair=pair,
        changes=changes,
        unmodelled=unmodelled,
        result=result,
        predicted=predicted,
        measured_us=measured.iteration_us,
        measured_breakdown=measured.breakdown.as_us(),
        notes=notes,
    )


def error_lines(v: Validation) -> list[str]:
    """The error table as short lines (for the app's notes on a prediction from another job)."""
    d = v.as_dict()
    lines = [
        f"predicted from {d['a']}: iteration {d['predicted_us'] / 1000:.2f} ms vs measured "
        f"{d['measured_us'] / 1000:.2f} ms, hold-out error {d['error_pct']:+.1f}% (null model, this job = "
        f"the other: {d['null_error_pct']:+.1f}%)"
    ]
    for r in d["families"]:
        if r["error_pct"] is not None:
            lines.append(
                f"  {r['family']}: predicted {r['predicted_us'] / 1000:.2f} ms, measured "
                f"{r['measured_us'] / 1000:.2f} ms ({r['error_pct']:+.1f}%)"
            )
    for r in d["collectives"]:
        if r["error_pct"] is not None:
            lines.append(
                f"  {r['kind']}: predicted {r['predicted_us'] / 1000:.2f} ms, measured "
                f"{r['measured_us'] / 1000:.2f} ms ({r['error_pct']:+.1f}%)"
            )
    if v.unmodelled:
        lines.append("not modelled: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in v.unmodelled.items()))
    return lines


def prediction_scenario(job_b: Job, v: Validation, name: str | None = None) -> ScenarioSummary:
    """The prediction of ``job_b`` from another job as a what-if scenario of ``job_b``: its
    iterations and outcome measured against ``job_b`` (not against the job it was predicted from),
    the error table in its notes."""
    summary = summarize_estimate(job_b, v.result, dict(v.changes), name or f"predicted from {v.pair.a.path}")
    measured = outcome_of(v.pair.b.baseline.config, job_b.ranks)
    return dataclasses.replace(
        summary,
        measured=measured,
        notes=error_lines(v) + list(summary.notes),
        predicted_from=Path(v.pair.a.path).name,
        null_error_pct=v.null_error_pct,
    )
