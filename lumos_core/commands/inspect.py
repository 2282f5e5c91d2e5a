"""``lumos inspect PATH``: what is in a trace folder."""

from __future__ import annotations

import argparse
import sys

import orjson

from lumos_core.commands.common import add_load_arguments, load_from_args
from lumos_core.trace.inspect_report import format_inspect, inspect_job
from lumos_core.trace.loader import load_job

DESCRIPTION = """Summarise a folder of per-rank PyTorch profiler traces (or one trace file):
per rank the device, world size, event counts, streams with their roles, threads, iterations
(ProfilerStep#N), the clock offset applied to align the ranks on their collectives, and memory
(peak allocated/reserved per rank and iteration, top allocating operators) where the trace has
the profiler's memory records (profile_memory=True)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_load_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    from lumos_core.replay.hta_terms import temporal_breakdown

    job = load_from_args(args, load_job)
    report = inspect_job(job)
    # device idle by HTA's temporal-breakdown definition (without its known bugs), per rank
    for r, t in zip(report["ranks"], job.ranks):
        r["device_temporal_breakdown"] = temporal_breakdown(t)
    if args.json:
        sys.stdout.write(
            orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
        )
    else:
        print(format_inspect(report))
        rows = [(r["rank"], r["device_type"], r["device_temporal_breakdown"]) for r in report["ranks"]]
        if any(b for _r, _d, b in rows):
            print("")
            print("device time, HTA's temporal breakdown (steps but the last; span = first to last device")
            print("activity; devices told by category, ns timestamps: HTA 0.5.0's known bugs left out)")
            for rank, dtype, b in rows:
                if b:
                    print(
                        f"  rank {rank} ({dtype}): {b['activities']} device activities, idle {b['idle_pct']:.1f} %, "
                        f"compute {b['compute_pct']:.1f} % of {b['span_us'] / 1000:.2f} ms"
                    )
    return 0
