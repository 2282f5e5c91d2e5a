"""``lumos sweep PATH --grid "dp=8,16 pp=1,2"``: estimate every configuration of a grid."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from pathlib import Path

import orjson

from lumos_core.api import Job
from lumos_core.commands.common import (
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
from lumos_core.sweep.engines import ENGINES, check_engine
from lumos_core.sweep.grid import parse_grid
from lumos_core.sweep.point import TOKENS_UNKNOWN
from lumos_core.sweep.results import ResultsFile, format_table
from lumos_core.sweep.run import SweepReport
from lumos_core.trace.loader import load_job
from lumos_core.whatif.knob_registry import KNOB
from lumos_core.whatif.knobs import parse_changes

DESCRIPTION = """Estimate every configuration of a grid of what-if knobs (one `lumos estimate` each) and
write a table: configuration, world size, predicted iteration time, breakdown, and tokens/s per GPU
when the batch is known, and predicted peak memory per GPU. Combinations that cannot be estimated
are kept as skipped rows with the reason; combinations that do not fit in GPU memory are kept with
their numbers, marked "out of memory", and never count as the best choice.

With --out the rows are appended to the CSV as they finish: an interrupted sweep keeps them, and
running the same command again resumes (configurations already in the file are not estimated
again; --restart starts over, as it should after changing the trace or a --baseline-* value:
rows are known by their configuration only).

Engines: "local" (default) is a process pool over this machine's cores; "ray" runs the same tasks on
a Ray cluster (--address, or a local Ray instance started for the sweep; pip install "lumos[ray]").

GRID: KNOB=VALUES separated by spaces; VALUES comma-separated, or LOW-HIGH for the powers of two
in between (integer knobs). Knobs: {knobs}.
A knob given as an option (--gpu H200) is held at that value for every configuration, as in --fixed.

Examples:
  lumos sweep traces/ --grid "dp=8,16,32,64 pp=1,2,4 microbatches=4,8,16" --out results.csv
  lumos sweep traces/ --grid "dp=8-1024 gpu=H100,A100" --jobs 2
  lumos sweep traces/ --grid "dp=16,32" --engine ray --address ray://head:10001""".format(
    knobs=textwrap.fill(" ".join(KNOB), 100, initial_indent=" " * 34).strip()
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_load_arguments(p, engine=False)  # --engine/--address choose where the sweep runs
    p.add_argument("--grid", required=True, help='knobs and values, e.g. "dp=8,16,32 pp=1,2,4"')
    p.add_argument(
        "--fixed",
        default=None,
        metavar="CHANGES",
        help='other knobs held for every configuration, e.g. "network_gbps=50,schedule=gpipe"',
    )
    p.add_argument("--engine", choices=ENGINES, default="local", help="where to estimate (default: local)")
    p.add_argument(
        "--jobs", "-j", type=int, default=None, metavar="N", help="parallel workers (default: cores)"
    )
    p.add_argument("--address", default=None, help="Ray cluster address (--engine ray; default: a local Ray)")
    p.add_argument(
        "--out", type=Path, default=None, metavar="CSV", help="results file (resumed when it exists)"
    )
    p.add_argument("--restart", action="store_true", help="overwrite the results file instead of resuming")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    add_profile_argument(p)
    add_knob_arguments(
        p.add_argument_group("knobs held at one value for every configuration (as in --fixed)"),
        help="{help}",
    )
    add_baseline_arguments(p)


def run(args: argparse.Namespace) -> int:
    fixed = parse_changes(args.fixed) if args.fixed else {}
    fixed.update(knob_values(args))  # --gpu H200 etc.: as in --fixed (and over it)
    parse_grid(args.grid, fixed)  # a bad grid fails before anything is loaded
    check_engine(args.engine, args.jobs, args.address)
    if args.engine == "ray":
        from lumos_core.sweep.engines import import_ray

        import_ray()  # say how to install it before loading anything
    job = Job(
        load_from_args(args, load_job), baseline=baseline_overrides(args), profile=profile_from_args(args)
    )
    opened: list[ResultsFile] = []

    def on_results(results: ResultsFile) -> None:
        opened.append(results)
        if results.done and not args.quiet:
            print(
                f"lumos sweep: resuming {args.out} ({len(results.done)} row(s) already there)",
                file=sys.stderr,
            )

    try:
        table = job.sweep(
            args.grid, fixed=fixed, jobs=args.jobs, engine=args.engine, address=args.address, out=args.out,
            restart=args.restart, on_results=on_results, progress=terminal_progress(not args.quiet),
        )  # fmt: skip
    except KeyboardInterrupt:
        if opened:
            sys.stderr.write(
                f"\nlumos sweep: interrupted; {opened[0].rows_on_disk()} row(s) kept in {args.out} - "
                "run the same command again to resume\n"
            )
        raise
    if args.json:
        sys.stdout.write(orjson.dumps(table.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(format_report(table.result, args.out))
    return 0


def format_report(report: SweepReport, out: Path | None) -> str:
    rows = report.rows
    ok = sum(r.ok for r in rows)
    oom = sum(r.estimated and not r.ok for r in rows)
    lines = [format_table(rows, report.grid.columns), ""]
    lines.append(
        f"{len(rows)} configurations: {ok} estimated"
        + (f", {oom} out of memory (kept, never on the Pareto front)" if oom else "")
        + f", {len(rows) - ok - oom} skipped"
        + (f", {report.resumed} read back from {out}" if report.resumed else "")
        + f"; {report.estimated} estimated in {report.seconds:.1f} s ({report.engine} engine, "
        f"{report.workers} workers)"
    )
    if any(r.ok and math.isnan(r.tokens_per_s_per_gpu) for r in rows):
        lines.append(TOKENS_UNKNOWN)
    # a CPU-paced trace gives every GPU-side configuration the same time: say why, once
    paced = next((n for r in rows for n in r.notes if n.startswith("CPU-paced by")), None)
    if paced:
        lines.append(f"note: {paced}")
    if out is not None:
        lines.append(f"results: {out}")
    return "\n".join(lines)
