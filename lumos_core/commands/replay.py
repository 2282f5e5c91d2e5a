"""``lumos replay PATH``: replay the execution graph and compare with the measured iterations."""

from __future__ import annotations

import argparse
import sys

import orjson

from lumos_core.commands.common import add_load_arguments, load_from_args, terminal_progress
from lumos_core.errors import ConfigError
from lumos_core.replay.run import ReplayResult, parse_scale, replay
from lumos_core.trace.loader import load_job

DESCRIPTION = """Build the execution graph of every rank (CPU->CPU, CPU->GPU launch, GPU->CPU sync,
GPU->GPU stream and event dependencies, collectives across ranks), replay it, and compare the
replayed iterations with the measured ones: iteration time, error, and the breakdown into exposed
compute, overlapped, exposed communication and other (idle) time.

--scale PATTERN=FACTOR multiplies the duration of every task whose name matches the regular
expression (e.g. --scale 'nccl=2' doubles communication kernels) before the replay: the simplest
what-if."""


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


def run(args: argparse.Namespace) -> int:
    scale = parse_scale(args.scale)
    job = load_from_args(args, load_job)
    result = replay(job, scale=scale, progress=terminal_progress(not args.quiet))
    if args.iteration is not None:
        _keep_iteration(result, args.iteration)
    if args.json:
        sys.stdout.write(
            orjson.dumps(result.as_dict(include_busy=args.busy), option=orjson.OPT_INDENT_2).decode()
        )
        sys.stdout.write("\n")
    else:
        print(format_replay(result))
    return 0


def _keep_iteration(result: ReplayResult, n: int) -> None:
    name = f"ProfilerStep#{n}"
    found = False
    for r in result.ranks:
        r.iterations = [it for it in r.iterations if it.name == name]
        r.critical_paths = {k: v for k, v in r.critical_paths.items() if k == name}
        found |= bool(r.iterations)
    if not found:
        raise ConfigError(f"no iteration {name} in the trace")


def format_replay(result: ReplayResult) -> str:
    d = result.as_dict()
    lines = [
        f"replayed {d['tasks']} tasks in {d['seconds']:.2f} s "
        f"(simulation {d['simulate_seconds'] * 1000:.0f} ms, {d['tasks_per_second'] / 1e6:.2f} M tasks/s)"
    ]
    lines.append("dependencies: " + ", ".join(f"{k} {v}" for k, v in d["edges"].items() if v))
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
    lines.append(f"mean absolute iteration-time error: {d['mean_abs_error_pct']:.3f}%")
    ge = d["gpu_start_error_us"]
    lines.append(f"GPU task start error vs measured: median {ge['median']:.1f} µs, p95 {ge['p95']:.1f} µs")
    if d["unexplained_delay_us"]:
        lines.append(
            f"GPU delay no dependency explains (work outside the trace window): "
            f"{d['unexplained_delay_us'] / 1000:.1f} ms in total"
        )
    for note in d["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
