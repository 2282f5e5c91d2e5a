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
    job = load_from_args(args, load_job)
    report = inspect_job(job)
    if args.json:
        sys.stdout.write(
            orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
        )
    else:
        print(format_inspect(report))
    return 0
