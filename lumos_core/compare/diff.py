"""``lumos diff A B``: what changed between two measured jobs.

Both jobs are summarised per rank and per steady-state iteration (:mod:`lumos_core.compare.summary`),
so they compare across rank counts and recorded step counts. Ranks are compared one to one when
both jobs hold the same ranks, per pipeline stage when both have the same number of stages, and
always overall. Kernels are matched by name and recorded input shape; one that only one job ran is
listed as appeared or vanished, never dropped; names are canonical
(:mod:`lumos_core.compare.canonical`), so ``torch.compile``'s renumbered regions and Triton kernels
are not changes. The inferred configuration of each job
(:func:`lumos_core.whatif.baseline.infer_baseline`) says which knobs differ.

Noise: each job's own iteration spread (:meth:`JobSummary.spread`, the standard deviation of its
steady iterations) pooled over the two jobs is the smallest change that means something; every
row whose change is smaller is marked ``within_noise``. A row's time per iteration varies less than
the whole iteration does, so this is a conservative mark: what it calls noise may be a real but
small change, what it leaves unmarked is larger than the runs' own variation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.compare.summary import (
    BREAKDOWN_KEYS,
    SUMMARY_DEFINITION,
    CollStat,
    JobSummary,
    Stat,
    collective_kind_rows,
    family_rows,
    summarize,
)
from lumos_core.errors import LumosError
from lumos_core.trace.model import Job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.config import Baseline
from lumos_core.whatif.knobs import STRUCTURE_KNOBS

# Knobs of the inferred configuration that ``diff`` compares: the job's structure (what ``lumos
# estimate`` can change), plus what it cannot: the device and the vocabulary.
CONFIG_KNOBS = STRUCTURE_KNOBS


NOISE_DEFINITION = (
    "the runs' own iteration spread: standard deviation of each rank's steady iterations around "
    "its mean, pooled over ranks, root mean square of the two jobs; a change smaller than it is "
    "within noise"
)


class PairError(LumosError):
    """Two jobs that cannot be compared the way asked (one CPU-only, missing ranks, ...)."""


@dataclass
class JobSide:
    """One job of a pair: where it came from, its inferred configuration and its tables."""

    path: str
    baseline: Baseline
    summary: JobSummary
    world_size: int
    ranks: list[int]
    device: str
    vocab: int | None = None

    @property
    def config(self) -> dict[str, Any]:
        d = {k: getattr(self.baseline.config, k) for k in CONFIG_KNOBS}
        d["world_size"] = self.world_size
        d["device"] = self.device
        if self.vocab is not None:
            d["vocab"] = self.vocab
        return d

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(set(range(self.world_size)) - set(self.ranks))


@dataclass
class JobDiff:
    a: JobSide
    b: JobSide
    differing_knobs: dict[str, list[Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def noise_us(self) -> float | None:
        """The runs' own iteration spread: the two jobs' standard deviations pooled (root mean square
        of those known); None when neither job has two steady iterations."""
        v = [s.std_us for s in (self.a.summary.spread(), self.b.summary.spread()) if s.std_us is not None]
        return float(np.sqrt(np.mean(np.square(v)))) if v else None

    def within_noise(self, delta_us: float) -> bool:
        noise = self.noise_us
        return noise is not None and abs(delta_us) < noise

    @property
    def iteration_delta_pct(self) -> float:
        a, b = self.a.summary.iteration_us, self.b.summary.iteration_us
        return 100.0 * (b / a - 1.0) if a else 0.0

    def rank_rows(self) -> list[dict[str, Any]]:
        """One row per rank (same rank sets) or per pipeline stage (same stage counts)."""
        a, b = self.a.summary.ranks, self.b.summary.ranks
        rows = []
        if set(a) == set(b):
            for r in sorted(a):
                rows.append(_group_row(f"rank {r}", [a[r]], [b[r]]))
            return rows
        pa, pb = self.a.baseline.config.pp, self.b.baseline.config.pp
        if pa == pb and pa > 1:
            sa = self.a.world_size // pa
            sb = self.b.world_size // pb
            for s in range(pa):
                ra = [v for k, v in a.items() if k // sa == s]
                rb = [v for k, v in b.items() if k // sb == s]
                if ra and rb:
                    rows.append(_group_row(f"stage {s}", ra, rb))
        return rows

    def iteration_rows(self) -> list[dict[str, Any]]:
        """Steady-state iterations aligned by position (the k-th of A with the k-th of B)."""
        ia, ib = self.a.summary.iterations, self.b.summary.iterations
        return [
            {"index": k, "a_us": round(x, 3), "b_us": round(y, 3), "delta_us": round(y - x, 3)}
            for k, (x, y) in enumerate(zip(ia, ib))
        ]

    def kernel_rows(self) -> list[dict[str, Any]]:
        ka, kb = self.a.summary.kernels, self.b.summary.kernels
        rows = []
        for key in set(ka) | set(kb):
            sa, sb = ka.get(key), kb.get(key)
            status = _status(sa, sb)
            sa, sb = sa or Stat(), sb or Stat()
            fam = self.a.summary.kernel_family.get(key) or self.b.summary.kernel_family.get(key, "")
            rows.append(
                {
                    "kernel": key,
                    "family": fam,
                    "status": status,
                    **_count_and_time(sa, sb),
                    "a_mean_us": round(sa.mean_us, 3),
                    "b_mean_us": round(sb.mean_us, 3),
                    "delta_us": round(sb.total_us - sa.total_us, 3),
                }
            )
        rows.sort(key=lambda r: (-abs(r["delta_us"]), -r["a_us"], r["kernel"]))
        return rows

    def collective_rows(self) -> list[dict[str, Any]]:
        ca, cb = self.a.summary.collectives, self.b.summary.collectives
        rows = []
        for key in sorted(set(ca) | set(cb), key=lambda k: (k[0], k[1], k[2])):
            sa, sb = ca.get(key), cb.get(key)
            status = _status(sa, sb)
            sa, sb = sa or CollStat(), sb or CollStat()
            rows.append(
                {
                    "kind": key[0],
                    "group_size": key[1],
                    "size_bytes": key[2],
                    "status": status,
                    **_count_and_time(sa, sb),
                    "delta_us": round(sb.total_us - sa.total_us, 3),
                    "a_bus_bw_gbps": _finite(sa.bus_bw_gbps),  # None when it did not run
                    "b_bus_bw_gbps": _finite(sb.bus_bw_gbps),
                }
            )
        return rows

    def cpu_op_rows(self) -> list[dict[str, Any]]:
        ca, cb = self.a.summary.cpu_ops, self.b.summary.cpu_ops
        rows = []
        for name in set(ca) | set(cb):
            sa, sb = ca.get(name), cb.get(name)
            status = _status(sa, sb)
            sa, sb = sa or Stat(), sb or Stat()
            rows.append(
                {
                    "name": name,
                    "status": status,
                    **_count_and_time(sa, sb),
                    "delta_us": round(sb.total_us - sa.total_us, 3),
                }
            )
        rows.sort(key=lambda r: (-abs(r["delta_us"]), -r["a_us"], r["name"]))
        return rows

    def as_dict(self, limit: int | None = None) -> dict[str, Any]:
        def side(s: JobSide) -> dict[str, Any]:
            return {
                "path": s.path,
                "iteration_us": round(s.summary.iteration_us, 3),
                "iterations": len(s.summary.iterations),
                "ranks": len(s.ranks),
                "missing_ranks": s.missing_ranks,
                "breakdown": {k: round(v, 3) for k, v in s.summary.breakdown.items()},
                "config": s.config,
                "inferred": {
                    k: {"value": v.value, "confidence": v.confidence, "how": v.how}
                    for k, v in s.baseline.fields.items()
                },
            }

        ba, bb = self.a.summary.breakdown, self.b.summary.breakdown
        noise = self.noise_us
        kernels = _marked(self.kernel_rows(), noise)
        cpu_ops = _marked(self.cpu_op_rows(), noise)
        delta = self.b.summary.iteration_us - self.a.summary.iteration_us
        return {
            "definition": SUMMARY_DEFINITION,
            "gpu": self.a.summary.gpu,  # kernels are GPU activities (else CPU operators by self time)
            "a": side(self.a),
            "b": side(self.b),
            "iteration_delta_us": round(delta, 3),
            "iteration_delta_pct": round(self.iteration_delta_pct, 3),
            "noise": {
                "spread_us": round(noise, 3) if noise is not None else None,
                "a": self.a.summary.spread().as_dict(),
                "b": self.b.summary.spread().as_dict(),
                "definition": NOISE_DEFINITION,
            },
            "iteration_within_noise": self.within_noise(delta),
            "breakdown_delta_us": {k: round(bb[k] - ba[k], 3) for k in BREAKDOWN_KEYS},
            "breakdown_within_noise": {k: self.within_noise(bb[k] - ba[k]) for k in BREAKDOWN_KEYS},
            "differing_knobs": self.differing_knobs,
            "iterations": _marked(self.iteration_rows(), noise),
            "ranks": _marked(self.rank_rows(), noise),
            "families": _marked(family_rows(self.a.summary, self.b.summary), noise),
            "kernels": kernels if limit is None else kernels[:limit],
            "kernels_total": len(kernels),
            "appeared": sum(r["status"] == "appeared" for r in kernels),
            "vanished": sum(r["status"] == "vanished" for r in kernels),
            "collectives": _marked(self.collective_rows(), noise),
            "collective_kinds": _marked(collective_kind_rows(self.a.summary, self.b.summary), noise),
            "cpu_ops": cpu_ops if limit is None else cpu_ops[:limit],
            "notes": self.notes,
        }


def _marked(rows: list[dict[str, Any]], noise: float | None) -> list[dict[str, Any]]:
    """Each row with ``within_noise``: its change is smaller than the runs' own iteration spread.
    A row only one job ran (appeared, vanished, a family or kind with no activity on one side) is a
    change in what ran, never noise, however little time it takes."""
    for r in rows:
        one_sided = r.get("status") in ("appeared", "vanished") or (
            "a_count" in r and (r["a_count"] > 0) != (r["b_count"] > 0)
        )
        r["within_noise"] = noise is not None and not one_sided and abs(r["delta_us"]) < noise
    return rows


def _status(sa: Stat | CollStat | None, sb: Stat | CollStat | None) -> str:
    """A row both jobs ran, one only A ran (vanished) or one only B ran (appeared)."""
    return "both" if sa and sb else ("vanished" if sa else "appeared")


def _count_and_time(sa: Stat | CollStat, sb: Stat | CollStat) -> dict[str, float]:
    """The columns every compared row has: count and time per rank per iteration, A then B."""
    return {
        "a_count": round(sa.count, 3),
        "b_count": round(sb.count, 3),
        "a_us": round(sa.total_us, 3),
        "b_us": round(sb.total_us, 3),
    }


def _finite(x: float) -> float | None:
    return round(x, 3) if np.isfinite(x) else None


def _group_row(label: str, ra: list[Any], rb: list[Any]) -> dict[str, Any]:
    ia = float(np.mean([r.iteration_us for r in ra]))
    ib = float(np.mean([r.iteration_us for r in rb]))
    row: dict[str, Any] = {
        "group": label,
        "a_iteration_us": round(ia, 3),
        "b_iteration_us": round(ib, 3),
        "delta_us": round(ib - ia, 3),
    }
    for k in BREAKDOWN_KEYS:
        a = float(np.mean([r.breakdown[k] for r in ra]))
        b = float(np.mean([r.breakdown[k] for r in rb]))
        row[f"a_{k}"] = round(a, 3)
        row[f"b_{k}"] = round(b, 3)
    return row


def job_side(job: Job, overrides: dict[str, Any] | None = None, *, shapes: bool = True) -> JobSide:
    """Summary and inferred configuration of one measured job."""
    if not job.ranks:
        raise PairError(f"{job.path}: no rank could be loaded")
    baseline = infer_baseline(job, overrides)
    summary = summarize(job.ranks, job.path, shapes=shapes)
    if not summary.ranks:
        raise PairError(f"{job.path}: no iteration found on any rank (no ProfilerStep and no events)")
    vocab = baseline.fields.get("vocab")
    return JobSide(
        path=job.path,
        baseline=baseline,
        summary=summary,
        world_size=job.world_size,
        ranks=sorted(t.rank for t in job.ranks),
        device=summary.device,
        vocab=vocab.value if vocab is not None else None,
    )


def differing_knobs(a: JobSide, b: JobSide) -> dict[str, list[Any]]:
    ca, cb = a.config, b.config
    return {k: [ca.get(k), cb.get(k)] for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k)}


def compare_sides(a: JobSide, b: JobSide) -> JobDiff:
    """The diff of two summarised jobs (raises PairError when they cannot be compared)."""
    if a.summary.gpu != b.summary.gpu:
        cpu, gpu = (a, b) if b.summary.gpu else (b, a)
        raise PairError(
            f"{cpu.path} is CPU-only (no GPU kernels) while {gpu.path} ran on {gpu.device}: kernels, "
            "families and breakdown are not comparable between a CPU and a GPU run"
        )
    knobs = differing_knobs(a, b)
    # world size follows from dp/tp/pp; keep it only when those do not explain it
    if "world_size" in knobs and any(k in knobs for k in ("dp", "tp", "pp")):
        del knobs["world_size"]
    notes = []
    for s, name in ((a, "A"), (b, "B")):
        if s.missing_ranks:
            notes.append(
                f"{name} ({s.path}) holds {len(s.ranks)} of {s.world_size} ranks; missing "
                f"{_ranks_text(s.missing_ranks)}: per-rank figures are over the ranks present"
            )
    if set(a.summary.ranks) != set(b.summary.ranks) and not _same_stages(a, b):
        notes.append(
            f"A has {len(a.ranks)} rank(s), B {len(b.ranks)}: compared per rank and iteration overall "
            "(mean over ranks), not rank by rank"
        )
    return JobDiff(a, b, knobs, notes)


def _same_stages(a: JobSide, b: JobSide) -> bool:
    return a.baseline.config.pp == b.baseline.config.pp > 1


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) <= 8:
        return ", ".join(map(str, ranks))
    return ", ".join(map(str, ranks[:8])) + f", ... ({len(ranks)} in all)"


def diff_jobs(
    a: Job,
    b: Job,
    overrides_a: dict[str, Any] | None = None,
    overrides_b: dict[str, Any] | None = None,
) -> JobDiff:
    """Diff two loaded jobs (see the module docstring)."""
    return compare_sides(job_side(a, overrides_a), job_side(b, overrides_b))
