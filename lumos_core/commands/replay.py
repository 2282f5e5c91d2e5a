"""``lumos replay PATH``: replay the execution graph and compare with the measured iterations."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import orjson

from lumos_core.api import Job, ReplayReport
from lumos_core.api.steps import HOLDOUT_DEFAULT_LIMIT
from lumos_core.commands.common import (
    SYNTHETIC_NOTE,
    StageTimer,
    add_load_arguments,
    add_timings_argument,
    load_from_args,
    terminal_progress,
)
from lumos_core.progress import scaled
from lumos_core.replay.run import ReplayResult, parse_scale
from lumos_core.trace.loader import load_job

if TYPE_CHECKING:  # the hold-out and the idle attribution are imported when asked for
    from lumos_core.replay.evaluate import HoldoutReport
    from lumos_core.replay.idle import IdleReport
    from lumos_core.replay.stragglers import StragglerReport

DESCRIPTION = """Build the execution graph of every rank (CPU->CPU, CPU->GPU launch, GPU->CPU sync,
GPU->GPU stream and event dependencies, collectives across ranks), replay it, and compare the
replayed iterations with the measured ones: iteration time, error, and the breakdown into exposed
compute, overlapped, exposed communication and other (idle) time.

--scale PATTERN=FACTOR multiplies the duration of every task whose name matches the regular
expression (e.g. --scale 'nccl=2' doubles communication kernels) before the replay: the simplest
what-if.

Accuracy is printed twice, with its definition: in-sample (the graph calibrated on the very
iterations it replays: close to exact by construction) and hold-out (each iteration replayed from
what the other iterations taught, with its own task durations), each beside four null models
(persistence, CPU-only, no-lag, GPU-only) on the same iterations. Jobs over a million tasks skip
the hold-out unless --holdout is given."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_load_arguments(p)
    p.add_argument("--iteration", type=int, default=None, metavar="N", help="only ProfilerStep#N")
    p.add_argument(
        "--scale",
        action="append",
        metavar="PATTERN=FACTOR",
        default=[],
        help="multiply the duration of tasks matching PATTERN (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--busy", action="store_true", help="include GPU busy fraction per 1 ms bin (JSON)")
    p.add_argument(
        "--holdout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"hold-out replay and null models (default: on up to {HOLDOUT_DEFAULT_LIMIT:,} tasks)",
    )
    p.add_argument(
        "--idle",
        action="store_true",
        help="idle time of every GPU stream and iteration by cause (host, sync, queued, event, peer, "
        "peer not loaded, before the trace window, unexplained)",
    )
    p.add_argument(
        "--keep-stalls",
        action="store_true",
        help="replay GPU delays no dependency explains as fixed waits (a job disturbed while traced)",
    )
    p.add_argument(
        "--holdout-cpu",
        choices=["measured", "learned"],
        default="measured",
        help="hold-out: the CPU work between a thread's calls is the held-out iteration's own "
        "(measured, default) or learned from the other iterations like every lag (learned)",
    )
    p.add_argument(
        "--keep-peer-waits",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="collectives whose peer ranks are not loaded: replay their measured waits (default), "
        "or drop them (--no-keep-peer-waits: no start delay, duration cut to the fastest same kernel)",
    )
    add_timings_argument(p)


def run(args: argparse.Namespace) -> int:
    scale = parse_scale(args.scale)
    timer = StageTimer()
    job = Job(
        load_from_args(args, load_job), keep_stalls=args.keep_stalls, keep_peer_waits=args.keep_peer_waits
    )
    timer.lap("load")
    progress = terminal_progress(not args.quiet)
    job.build_graph(scaled(progress, 0.0, 0.5))
    timer.lap("graph")
    report = job.replay(
        scale=scale,
        iteration=args.iteration,
        holdout=args.holdout,
        holdout_cpu=args.holdout_cpu,
        busy=args.busy,
        progress=scaled(progress, 0.5, 1.0),
    )
    timer.lap("replay")
    holdout = report.holdout  # computed here, when first read
    timer.lap("holdout")
    result = report.result
    if args.json:
        d = report.to_dict()
        if args.idle:
            d.update(job.idle().to_dict())
        text = orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        timer.lap("report")
        if args.timings:  # encoded again with them (a few ms, after the last stage)
            d["timings"] = timer.as_dict()
            text = orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        sys.stdout.write(text.decode())
        sys.stdout.write("\n")
    else:
        print(format_replay(report))
        if args.keep_stalls:
            print("stalls kept: GPU delays no dependency explains are replayed as fixed waits")
        if report.peer_note:
            print(report.peer_note)
        print(format_accuracy(result, holdout))
        if report.stragglers is not None and len(report.stragglers.ranks) > 1:  # one rank: no peers
            print(format_stragglers(report.stragglers))
        if job.data.is_synthetic:
            print(SYNTHETIC_NOTE)
        if args.idle:
            print(format_idle(job.idle().result))
        timer.lap("report")
        if args.timings:
            print(timer.summary())
    return 0


def format_stragglers(report: StragglerReport) -> str:
    """The stragglers --json lists, one line each with its reason, or that there are none."""
    flagged = report.flagged
    if not flagged:
        return "\nstragglers: none flagged (--json: every rank's figures and the tests)"
    lines = ["", f"stragglers: {len(flagged)} rank(s) (--json: every rank's figures and the tests)"]
    lines += [f"  rank {r.rank}: {r.reason}" for r in flagged]
    return "\n".join(lines)


def format_accuracy(result: ReplayResult, holdout: HoldoutReport) -> str:
    """In-sample and hold-out accuracy side by side, each beside the null models, with definitions."""
    from lumos_core.replay.evaluate import HOLDOUT_DEFINITION

    ins = result.as_dict()
    lines = ["", "accuracy (iteration time: mean |error|; GPU task start: median / p95 |error|)"]
    lines.append(f"{'model':<24} {'iteration':>10} {'GPU start median':>17} {'p95':>12}")

    def row(name: str, pct: float | None, ge: dict[str, float] | None) -> str:
        p = "n/a" if pct is None else f"{pct:.3f}%"
        m = "n/a" if ge is None else f"{ge['median']:.1f} µs"
        q = "n/a" if ge is None else f"{ge['p95']:.1f} µs"
        return f"{name:<24} {p:>10} {m:>17} {q:>12}"

    lines.append(row("in-sample", ins["mean_abs_error_pct"], ins["gpu_start_error_us"]))
    ho = holdout.holdout_dict()
    if holdout.available:
        lines.append(
            row(
                f"hold-out ({ho['iterations']} iterations)",
                ho["mean_abs_error_pct"],
                ho["gpu_start_error_us"],
            )
        )
        for name, d in holdout.null_models_dict().items():
            lines.append(row(f"  null: {name}", d["mean_abs_error_pct"], d["gpu_start_error_us"]))
    lines.append(holdout.summary_line())
    lines.append(
        "in-sample: the graph is calibrated on the iterations it replays (close to exact by construction)"
    )
    lines.append(HOLDOUT_DEFINITION.split("; in-sample")[0])
    if holdout.available:
        lines.append(
            "null models: persistence = mean of the other iterations; cpu_only = no GPU->CPU "
            "dependencies; no_lag = learned lags at zero; gpu_only = GPU streams alone, launches ignored"
        )
    return "\n".join(lines)


def format_replay(report: ReplayReport) -> str:
    d = report.result.as_dict()
    t = report.times.as_dict() if report.times is not None else None
    lines = [
        f"replayed {d['tasks']} tasks"
        + (
            f" in {t['seconds']:.2f} s (simulation {t['simulate_seconds'] * 1000:.0f} ms, "
            f"{t['tasks_per_second'] / 1e6:.2f} M tasks/s)"
            if t
            else ""
        )
    ]
    edges = ", ".join(f"{k} {v}" for k, v in d["edges"].items() if v)
    lines.append(f"dependencies: {edges or 'none (every task is independent of the others)'}")
    if d["scale"]:
        lines.append("scaled: " + ", ".join(f"{k} x{v}" for k, v in d["scale"].items()))
    lines.append(f"definition: {d['definition']}")
    lines.append("")
    lines.append(
        f"{'rank':>4} {'iteration':<18} {'measured ms':>12} {'replayed ms':>12} {'error':>8}   "
        f"{'breakdown measured -> replayed (ms): compute / overlap / comm / other'}"
    )
    for r in d["ranks"]:
        for it in r["iterations"]:
            bm, br = it["breakdown"]["measured"], it["breakdown"]["replayed"]
            keys = ("exposed_compute_us", "overlapped_us", "exposed_comm_us", "other_us")
            m = " / ".join(f"{bm[k] / 1000:.2f}" for k in keys)
            p = " / ".join(f"{br[k] / 1000:.2f}" for k in keys)
            lines.append(
                f"{r['rank']:>4} {it['name']:<18} {it['measured_us'] / 1000:12.3f} "
                f"{it['replayed_us'] / 1000:12.3f} {it['error_pct']:7.2f}%   {m}  ->  {p}"
            )
    lines.append("")
    # The replay above is calibrated on the very iterations it replays: its errors are in-sample
    # (the hold-out figures, where available, follow in the accuracy table).
    label = "scaled replay vs measured (not an accuracy figure)" if d["scale"] else "in-sample"
    lines.append(f"{label}: mean absolute iteration-time error {d['mean_abs_error_pct']:.3f}%")
    ge = d["gpu_start_error_us"]
    if ge is None:
        lines.append(f"{label}: GPU task start error n/a (no GPU tasks: a CPU-only trace)")
    else:
        lines.append(f"{label}: GPU task start error median {ge['median']:.1f} µs, p95 {ge['p95']:.1f} µs")
    if d["unexplained_delay_us"]:
        lines.append(
            f"GPU delay no dependency explains (work outside the trace window): "
            f"{d['unexplained_delay_us'] / 1000:.1f} ms in total"
        )
    for note in d["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


_IDLE_HEADERS = {"before_window": "pre-window", "peer_not_loaded": "peer-absent"}


def format_idle(report: IdleReport) -> str:
    """The idle table: per rank, GPU stream and iteration, idle time by cause (ms)."""
    from lumos_core.replay.idle import CAUSES

    lines = ["", "GPU idle time by cause (ms; the causes add up to the stream's measured idle time)"]
    lines.append(
        f"{'rank':>4} {'stream':>6} {'iteration':<18} {'idle':>8} "
        + " ".join(f"{_IDLE_HEADERS.get(c, c):>11}" for c in CAUSES)
    )
    for r in report.rows:
        lines.append(
            f"{r.rank:>4} {r.stream:>6} {r.iteration:<18} {r.idle_ns / 1e6:8.3f} "
            + " ".join(f"{r.causes[c] / 1e6:11.3f}" for c in CAUSES)
        )
    lines.append(
        "queued: launched before the stream went idle (GPU behind the CPU), never host; pre-window: "
        "launched before the trace window began; peer-absent: waiting for peer ranks that are not loaded"
    )
    u = report.unexplained_summary()
    lines.append(f"unexplained delays: {u['count']}, {u['total_us'] / 1000:.2f} ms in total")
    if u["largest"]:
        big = u["largest"]
        lines.append(
            f"  largest: {big['us']:.1f} µs before {big['task'][:60]} (rank {big['rank']}, stream "
            f"{big['stream']}, at {big['start_us'] / 1000:.3f} ms)"
        )
    for p in u["periodic"]:
        lines.append(
            f"  periodic on rank {p['rank']}: {p['count']} delays every {p['period_us'] / 1000:.3f} ms"
        )
    if not u["periodic"] and u["count"]:
        lines.append("  no periodic pattern among delays of 10 µs or more")
    return "\n".join(lines)
