"""``lumos estimate PATH``: predict a configuration that was never run."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import orjson

from lumos_core.api import Job
from lumos_core.commands.common import (
    SYNTHETIC_NOTE,
    add_baseline_arguments,
    add_knob_arguments,
    add_load_arguments,
    add_profile_argument,
    baseline_overrides,
    knob_values,
    load_from_args,
    profile_from_args,
    terminal_progress,
)
from lumos_core.graph.build import build_graph
from lumos_core.perf.kernel_curves import profile_curves
from lumos_core.progress import scaled
from lumos_core.replay.idle import stalls_note
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import Job as TracedJob
from lumos_core.trace.overlap_slowdown import measure_overlap_slowdown
from lumos_core.whatif.baseline import group_roles
from lumos_core.whatif.config import Baseline, JobConfig, check
from lumos_core.whatif.estimate import EstimateResult, predict_memory_or_note
from lumos_core.whatif.export import refuse_inside_traces
from lumos_core.whatif.memory_model import MemoryPrediction
from lumos_core.whatif.retime import comm_model_from_trace
from lumos_core.whatif.retime.compute import fit_gemm_curve
from lumos_core.whatif.throughput import GPU_BOUND_CPU_SCALE

DESCRIPTION = """Predict the iteration time, breakdown and timeline of a configuration that was never
run, from the traces of one run: the execution graph is rewritten (new collective and kernel
durations; for pipeline, microbatch and layer changes a rebuilt schedule) and replayed.

Knobs left out keep the baseline inferred from the trace (--show-baseline prints it, with how each
value was found). Values the trace cannot tell (e.g. hidden size without recorded shapes) can be
given with --baseline-<knob>.

Examples:
  lumos estimate traces/ --dp 16
  lumos estimate traces/ --pp 4 --microbatches 16 --schedule 1f1b
  lumos estimate traces/ --gpu H200 --out predicted/
  lumos estimate traces/ --tp 8 --pp 12 --gpu A100 --recompute full

Every estimate also predicts peak memory per rank (weights, gradients, optimizer states,
activations of the microbatches in flight, and a constant calibrated on the trace's memory
records when it has them) against the GPU's capacity, and flags a configuration that does not fit."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_load_arguments(p)
    add_knob_arguments(p.add_argument_group("configuration to predict (every knob of the registry)"))
    add_baseline_arguments(p)
    p.add_argument(
        "--show-baseline", action="store_true", help="print what was inferred from the trace and stop"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the predicted timeline, one Kineto trace per rank, into DIR",
    )
    p.add_argument("--force", action="store_true", help="replace DIR if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--keep-stalls",
        action="store_true",
        help="keep GPU delays no dependency explains as fixed waits in the predicted job (a job "
        "disturbed while it was traced); by default they are not replayed",
    )
    add_profile_argument(p)
    p.add_argument(
        "--memory-only",
        action="store_true",
        help="predict peak memory only (no graph rewrite or replay: instant, for large layouts)",
    )


def run(args: argparse.Namespace) -> int:
    if args.out is not None:  # before loading: a refused folder should not cost a parse
        refuse_inside_traces(args.out, args.path)
    job = Job(
        load_from_args(args, load_job),
        baseline=baseline_overrides(args),
        profile=profile_from_args(args),
        keep_stalls=args.keep_stalls,
    )
    baseline = job.baseline
    if args.show_baseline:
        curves = fitted_models(job.data, baseline)
        if args.json:
            out = {**baseline.as_dict(), "fitted_models": curves}
            # the fitted curves hold numpy floats
            opts = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
            sys.stdout.write(orjson.dumps(out, option=opts).decode() + "\n")
        else:
            print(format_baseline(baseline))
            print("\nfitted performance models (re-timing uses these):")
            for line in curves["lines"]:
                print("  " + line)
        return 0
    changes = knob_values(args)
    config = baseline.config.with_changes(**changes)
    check(config, baseline)
    if args.memory_only:
        return _memory_only(job.data, baseline, config, args.json)
    progress = terminal_progress(not args.quiet)
    job.build_graph(scaled(progress, 0.0, 0.4))
    report = job.estimate(progress=scaled(progress, 0.4, 1.0), **changes)
    if args.out is not None:
        roles = group_roles(job.data)[0]
        report.export(args.out, roles=roles, overwrite=args.force, progress=terminal_progress(not args.quiet))
    if args.json:
        d = report.to_dict()
        if args.out is not None:
            d["out"] = str(args.out)
        sys.stdout.write(
            orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
        )
    else:
        print(format_estimate(report.result, args.out))
        note = stalls_note(args.keep_stalls, job.graph.unexplained_ns)
        if note:
            print(note)
        if job.data.is_synthetic:
            print(SYNTHETIC_NOTE)
    return 0


def _memory_only(job, baseline, config: JobConfig, as_json: bool) -> int:  # type: ignore[no-untyped-def]
    notes: list[str] = []
    memory = predict_memory_or_note(job, baseline, config, notes)
    if as_json:
        d = {"config": config.as_dict(), "memory": memory.as_dict() if memory else None, "notes": notes}
        sys.stdout.write(orjson.dumps(d, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(f"configuration {config.label()} ({config.world_size} GPUs) [{config.label(baseline.config)}]")
        print("\n".join(format_memory(memory)[1:] + [f"note: {n}" for n in notes]))
    return 0


def format_baseline(b) -> str:  # type: ignore[no-untyped-def]
    lines = ["baseline inferred from the trace:"]
    for k, v in b.fields.items():
        lines.append(f"  {k:<14} {v.value!s:<10} {v.confidence:<9} {v.how}")
    for role, groups in b.groups.items():
        lines.append(f"  {role} groups: {len(groups)} x {len(groups[0]) if groups else 0} ranks")
    lines.extend(f"  note: {n}" for n in b.notes)
    return "\n".join(lines)


def _fmt_bd(d: dict[str, float]) -> str:
    return " / ".join(
        f"{d[k] / 1000:.2f}" for k in ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")
    )


def format_estimate(r: EstimateResult, out: Path | None) -> str:
    d = r.as_dict()
    base, pred = d["baseline"], d["predicted"]
    cfg_b = JobConfig.from_dict(base["config"])
    cfg_p = JobConfig.from_dict(pred["config"])
    lines = [
        *cpu_paced_lead(r),
        f"baseline  {cfg_b.label():<22} {cfg_b.world_size:>6} GPUs   measured {base['iteration_us'] / 1000:9.3f} ms   "
        f"replayed {base['replayed_iteration_us'] / 1000:9.3f} ms",
        f"predicted {cfg_p.label():<22} {cfg_p.world_size:>6} GPUs   {pred['iteration_us'] / 1000:9.3f} ms "
        f"({pred['change_pct']:+.1f}% vs replayed baseline)   [{cfg_p.label(cfg_b)}]",
        *format_throughput(r),
        "",
        "breakdown (ms): exposed compute / overlapped / exposed comm / other",
        f"  baseline  {_fmt_bd(base['replayed_breakdown'])}",
        f"  predicted {_fmt_bd(pred['breakdown'])}",
        "",
        "re-timed:" if d["retimed"] else "re-timed: nothing (identity)",
    ]
    for x in d["retimed"]:
        lines.append(
            f"  {x['count']:>7} x {x['what']}: {x['model']}" + (f" [{x['detail']}]" if x["detail"] else "")
        )
    lines.extend(format_memory(r.memory))
    lines.append("")
    lines.extend(f"note: {n}" for n in d["notes"])
    lines.append(f"definition: {d['definition']}")
    if out is not None:
        lines.append(f"predicted timeline written to {out} ({r.world_size} rank files)")
    return "\n".join(lines)


def cpu_paced_lead(r: EstimateResult) -> list[str]:
    """The first lines when the host hides this GPU what-if (and what to try)."""
    if r.cpu_paced is None:
        return []
    return [
        f"CPU-PACED by {100 * r.cpu_paced:.0f} %: the host (Python, launch calls) sets this trace's pace, so "
        "GPU what-ifs barely move its iteration.",
        f"  assume GPU-bound: add --cpu-scale {GPU_BOUND_CPU_SCALE} (host time x {GPU_BOUND_CPU_SCALE}, as CUDA "
        "graphs or torch.compile leave it; 0 for no host time)",
        "",
    ]


def format_throughput(r: EstimateResult) -> list[str]:
    """Rate per GPU and MFU, baseline and predicted, and which of time or rate ranks them."""
    t, b = r.throughput, r.baseline_throughput
    if t is None or b is None:
        return []
    lines = [
        f"throughput  baseline {b.rate_text()}, {b.mfu_text()}   predicted {t.rate_text()}, {t.mfu_text()}",
    ]
    tc = r.throughput_change_pct
    if tc == tc:
        lines[0] += f"   ({tc:+.1f}% per GPU)"
    if r.work_changed and b.per_iteration != t.per_iteration:
        lines.append(
            f"  the work per iteration changes ({b.per_iteration:,.0f} -> {t.per_iteration:,.0f} {t.unit}): "
            "compare throughput, not iteration time"
        )
    elif r.work_changed:
        lines.append(
            f"  the model changes ({b.model_flops / 1e12:,.1f} -> {t.model_flops / 1e12:,.1f} TFLOP per "
            "iteration): compare MFU"
        )
    if t.mfu_unknown:
        lines.append(f"  {t.mfu_unknown}")
    return lines


def _gib(b: int) -> str:
    return f"{b / 2**30:,.2f} GiB" if abs(b) >= 2**30 else f"{b / 2**20:,.1f} MiB"


def format_memory(m: MemoryPrediction | None) -> list[str]:
    """Predicted peak memory per rank (one line per pipeline stage) against the GPU's capacity."""
    if m is None:
        return ["", "memory: not predicted (see notes)"]
    verdict = "fits" if m.fits else "DOES NOT FIT"
    lines = [
        "",
        f"memory: predicted peak {_gib(m.peak_bytes)} per rank (stage {m.peak.stage}) of {m.gpu} capacity "
        f"{_gib(m.capacity_bytes)}: {verdict}",
        "  stage  ranks            in flight       peak   params    grads  optimizer  activations     other",
    ]
    for s in m.stages:
        p = s.parts
        flag = "" if s.peak_bytes <= m.capacity_bytes else "  out of memory"
        lines.append(
            f"  {s.stage:>5}  {s.ranks[0]:>6}-{s.ranks[1]:<8} {s.in_flight:>9} {_gib(s.peak_bytes):>10} "
            f"{_gib(p.params):>8} {_gib(p.grads):>8} {_gib(p.optimizer):>10} {_gib(p.activations):>12} "
            f"{_gib(p.other):>9}{flag}"
        )
    lines.append(f"  {m.calibration}")
    lines.extend(f"  note: {n}" for n in m.notes)
    return lines


def fitted_models(job: TracedJob, baseline: Baseline) -> dict[str, Any]:
    """The kernel curves and the collective model this trace calibrates (for --show-baseline)."""
    gpu = baseline.config.gpu_profile
    graph = build_graph(job)
    curves = profile_curves(gpu)
    curves["gemm"] = fit_gemm_curve(job, graph, gpu)
    comm = comm_model_from_trace(job, graph, gpu)
    interference = measure_overlap_slowdown(job)
    lines = [
        curves["gemm"].describe(),
        curves["attention"].describe() + " (attention kernels move along it with micro-batch, seq, hidden)",
        curves["elementwise"].describe() + " (for reference: elementwise kernels scale with their bytes)",
        *comm.describe(),
        interference.describe(),
    ]
    return {
        "kernel_curves": {k: dataclasses.asdict(c) for k, c in curves.items()},
        "collectives": comm.params.as_dict(),
        "overlap_slowdown": dataclasses.asdict(interference),
        "lines": lines,
    }
