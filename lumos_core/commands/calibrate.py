"""``lumos calibrate RUNS... --out PROFILE.json``: fit a hardware profile on your own runs."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from lumos_core.commands.common import report_load_problems, terminal_progress
from lumos_core.commands.diff import dump_json
from lumos_core.compare.calibrate import Calibration, fit
from lumos_core.errors import LumosError
from lumos_core.trace.loader import load_job

DESCRIPTION = """Fit a hardware profile from measured jobs of one cluster: GEMM rate by shape class,
attention and elementwise throughput, collective latency and bandwidth per link class (NCCL model)
and an alpha-beta line per link class and collective kind, kernel launch and point-to-point
overheads. Prints the fit's (in-sample) residuals and which parameters the runs did not constrain.

Use the profile with lumos estimate|sweep|validate --profile PROFILE.json. The documented way to
check how far to trust it on your fleet: fit on some runs, then validate on a run left out:
  lumos calibrate runs/a runs/b runs/c --out cluster.json
  lumos validate runs/a runs/d --profile cluster.json"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="trace folders (or files) of runs of one cluster")
    p.add_argument(
        "--out", type=Path, required=True, metavar="PROFILE.json", help="where to write the profile"
    )
    p.add_argument("--force", action="store_true", help="replace PROFILE.json if it exists")
    p.add_argument("--no-cache", action="store_true", help="parse every file again (ignore the cache)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.force:
        raise LumosError(f"{args.out} exists: choose another name or pass --force")
    jobs = [
        load_job(r, progress=terminal_progress(not args.quiet), use_cache=not args.no_cache)
        for r in args.runs
    ]
    for job in jobs:
        report_load_problems(job)
    cal = fit(jobs, progress=terminal_progress(not args.quiet))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cal.profile.save(args.out)
    if args.json:
        d = cal.as_dict()
        d["out"] = str(args.out)
        dump_json(d)
    else:
        print(format_calibration(cal, args.out))
    return 0


def _rate(x: float | None, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.1f} {prefix}{unit}"
    return f"{x:.3g} {unit}"


POOR_FIT_PCT = 50.0  # an in-sample residual above this says one rate does not describe the samples


def rate_spread(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """10th and 90th percentile of the samples' own rates (work / seconds)."""
    r = np.asarray([w / s for w, s in pts if s > 0])
    return (float(np.quantile(r, 0.1)), float(np.quantile(r, 0.9))) if len(r) else (0.0, 0.0)


def format_calibration(cal: Calibration, out: Path) -> str:
    p = cal.profile
    d = cal.as_dict()
    res = d["residuals"]
    n = d["samples"]
    lines = [f"profile of {p.device} from {len(p.runs)} run(s), written to {out}", ""]
    lines.append(f"GEMM rate by shape class ({n['gemm']} GEMMs; residual = in-sample median |error|):")
    for c in p.gemm:
        lo, hi = c.flops_range
        lines.append(
            f"  {lo:9.2e}-{hi:9.2e} FLOPs  {_rate(c.flops_per_s, 'FLOP/s'):>14}  "
            f"{c.samples:6d} samples  residual {c.residual_pct:5.1f}%"
        )
    if "gemm" in res:
        lines.append(
            f"  all GEMMs: residual {res['gemm']:.1f}% with the classes, {res['gemm_one_rate']:.1f}% with one rate"
        )
    lines.append(
        f"attention   {_rate(p.attention_flops_per_s, 'FLOP/s'):>14}"
        + (
            f"  ({n['attention']} calls, in-sample residual {res['attention']:.1f}%)"
            if "attention" in res
            else ""
        )
    )
    lines.append(
        f"elementwise {_rate(p.elementwise_elems_per_s, 'elem/s'):>14}"
        + (
            f"  ({n['elementwise']} ops, in-sample residual {res['elementwise']:.1f}%)"
            if "elementwise" in res
            else ""
        )
    )
    for name, pts, unit in (
        ("attention", cal.samples.attention, "FLOP/s"),
        ("elementwise", cal.samples.elementwise, "elem/s"),
    ):
        if res.get(name, 0.0) > POOR_FIT_PCT:
            lo, hi = rate_spread(pts)
            lines.append(
                f"  {name}: one rate fits these operators poorly: their own rates span "
                f"{_rate(lo, unit)} to {_rate(hi, unit)} (10th-90th percentile; per-operator cost "
                "per element and fixed overheads differ), so the residual is the model's, not noise"
            )
    if p.alpha_beta:
        lines.append("collectives (alpha-beta per link class and kind):")
        for a in p.alpha_beta:
            lines.append(
                f"  {a.scope:<5} {a.kind:<14} alpha {a.alpha_us:8.2f} µs  beta {a.beta_gbps:8.1f} GB/s  "
                f"{a.samples:5d} samples  residual {a.residual_pct:5.1f}%"
            )
    if p.comm is not None:
        lines.append(f"  NCCL model, NVLink: {p.comm.source_intra}")
        lines.append(f"  NCCL model, network: {p.comm.source_inter}")
    if p.launch_overhead_us is not None:
        lines.append(f"kernel launch {p.launch_overhead_us:.2f} µs (median of {n['launch']} calls)")
    if p.p2p_overhead_us is not None:
        lines.append(f"point-to-point {p.p2p_overhead_us:.2f} µs (median of {n['p2p']} small send/recv)")
    if p.unconstrained:
        lines += ["", "not constrained by these runs (estimates keep their default model):"]
        lines += [f"  - {u}" for u in p.unconstrained]
    lines += [f"note: {x}" for x in p.notes]
    return "\n".join(lines)
