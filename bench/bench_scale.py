"""Scale benchmark: synthetic Megatron jobs of 64, 256 and 512 ranks replayed end to end.

Per job it prints: tasks, cold end-to-end replay (parse the JSON + graph + simulate + critical paths
+ breakdowns + report), cached end-to-end replay (columns from the cache), tasks/s, peak RSS and bytes
per task, and ``lumos estimate --dp 16`` time. The same figures are measured in the same run for
the code before the speed-up (a detached ``git worktree`` of ``--baseline-ref``), where it fits in
memory: a run is skipped when its bytes per task at a smaller job project it over ``--max-gb``, and
killed if it grows past it anyway.

Every run is a separate ``python -m lumos_core`` process (peak RSS from ``wait4``, so it is that
command's own), with its own cache folder, and the project's bytecode cached (as an installed
package has it, even where the shell sets ``PYTHONDONTWRITEBYTECODE``). The cached replay's
whole-command figures (process start to exit) are followed by the same run split by its own stage
timers (``--timings``, where the code has it): the in-process pipeline from the cached load to the
report, with its tasks/s, and the start-up (interpreter, imports) and exit around it. The synthetic
jobs are written once into the temp directory and reused (``lumos synth`` is deterministic); they are
SYNTHETIC (our own cost models): they measure speed and memory, never accuracy.

Targets: end to end >= 1 M tasks/s on 2 cores and <= 250 B/task; the 512-rank 175B job <= 60 s and
<= 8 GB; ``estimate --dp 16`` on it <= 30 s. A closing table marks each met or not for the current
code, under both readings of "end to end" (the whole command, and the in-process pipeline from the
cached load to the report) and of bytes per task (peak RSS / tasks, and the cost of each extra task).
``--repeat N`` runs each cached replay N times and shows the median (peak RSS: the largest). The
table sets apart the runtime floor, measured in the same run: the same command on an 8-rank job of
~4 k tasks (interpreter, imports, numba and its compiled kernels, exit), and what each job costs above it;
for the smallest job it adds the bytes of the execution graph's own arrays, the least the job needs
beside the floor.
Each job then gets one verdict under the reading of the issue this project settled on
(``issue_reading_misses``): speed over the stages the issue names (cached load to report), memory per
task above the runtime floor and per extra task, the 512-rank targets as whole commands; on a machine
that charges extra for fresh memory, a verdict that misses a time says so.

The machine is probed at the start and after the jobs (``machine_state.py``, in a fresh process):
what a page of fresh memory costs to touch, what it costs touched again, and a fixed Python loop.
Where fresh memory costs many times more (a VM whose host takes freed memory back), the table adds
each job's system time, where that charge lands: such a run's speed figures are the machine's, not
the code's.

Then, for the jobs in ``--parse-jobs`` (default 512), the cold parse alone (``load_job`` into an empty
cache folder, each in a fresh process): the local engine (default workers) and ``--engine ray``
(a local Ray instance) with 1 and with 2 workers, in s per GiB of JSON beside the floor measured in
the same run (``gzip.decompress`` + ``orjson.loads`` of the files one after another in one process;
for more than ``--floor-files`` files an evenly spaced sample, scaled by JSON bytes). Target: cold
load <= 12 s/GiB on 2 cores and never slower than the floor. Run it under the 512-rank lock.

With ``--estimate-only``: only ``lumos estimate --dp 16`` per job with the cache warm (kept in the
benchmark's cache folder; an untimed first run fills it), ``--repeat`` runs per code, alternated.

Usage: .venv/bin/python bench/bench_scale.py [--jobs 64,256,512] [--baseline-ref REF] [--no-baseline]
       [--repeat N] [--parse-jobs 512] [--ray-workers 1,2] [--parse-only] [--estimate-only]
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from common import REPO
from machine_state import MachineState
from scale.jobs import DEFAULT_BASELINE, ROOT, baseline_tree, measure, run_cli, synth, tasks_hint
from scale.parse import parse_table
from scale.probe import floor_line, measure_floor, report_machine
from scale.report import estimate_figure, fmt, linearity
from scale.verdicts import ESTIMATE_TARGET_S, targets


def estimate_only(names: list[str], codes: list[tuple[str, Path]], args: argparse.Namespace) -> None:
    """Only ``lumos estimate --dp 16`` per job with the cache warm (the cache folder of
    ``--keep-cache``; filled by an untimed first run when empty), ``--repeat`` times, runs of the
    codes alternated."""
    max_bytes = int(args.max_gb * 2**30)
    print(
        f"{'ranks':>5} {'code':<8} {'estimate --dp 16: wall s (CPU s, peak RSS, inside estimate())':<60} target"
    )
    for name in names:
        job = synth(name)
        est_args = ["estimate", str(job), "--dp", "16", "--json", "-q"]
        for label, code in codes:
            cache = ROOT / "cache" / f"{label}-{name}"
            if not ((cache / "ranks").is_dir() and any((cache / "ranks").iterdir())):
                warm = run_cli(code, est_args, cache, max_bytes, args.timeout)  # parses: not timed
                if warm.error:
                    print(f"{name:>5} {label:<8} {warm.error}", flush=True)
        for _ in range(args.repeat):
            for label, code in codes:
                cache = ROOT / "cache" / f"{label}-{name}"
                est = run_cli(code, est_args, cache, max_bytes, args.timeout)
                ok = (
                    ""
                    if est.error or name != "512"
                    else (f"<= {ESTIMATE_TARGET_S:g} s: {'yes' if est.wall <= ESTIMATE_TARGET_S else 'no'}")
                )
                print(f"{name:>5} {label:<8} {estimate_figure(est):<60} {ok}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default="64,256,512", help="comma-separated: 64, 256, 512")
    ap.add_argument("--baseline-ref", default=DEFAULT_BASELINE, help="git ref of the 'before' code")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--max-gb", type=float, default=8.0, help="never let one run exceed this RSS")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--parse-jobs", default="512", help="jobs whose cold parse is timed ('' for none)")
    ap.add_argument(
        "--ray-workers", default="1,2", help="local Ray worker counts for the parse ('' for none)"
    )
    ap.add_argument("--floor-files", type=int, default=64, help="files the floor parses (a sample beyond)")
    ap.add_argument("--parse-only", action="store_true", help="only the cold parse table")
    ap.add_argument(
        "--keep-cache",
        action="store_true",
        help="keep each job's parsed columns for the next run (which then skips the cold run)",
    )
    ap.add_argument(
        "--estimate-only",
        action="store_true",
        help="only `lumos estimate --dp 16` with the cache warm (kept between runs, like --keep-cache)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed cached replays per code and job (the median is shown; with --estimate-only: estimate runs)",
    )
    args = ap.parse_args()
    max_bytes = int(args.max_gb * 2**30)
    names = [n.strip() for n in args.jobs.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("64", "256", "512")]  # "floor" is measured on its own
    if unknown:
        ap.error(f"--jobs: unknown job(s) {', '.join(unknown)} (choose from 64, 256, 512)")
    codes = [("after", REPO)]
    if not args.no_baseline:
        codes.append(("before", baseline_tree(args.baseline_ref)))
    if args.estimate_only:
        estimate_only(names, codes, args)
        if not args.no_baseline:
            subprocess.run(["git", "worktree", "remove", "--force", str(codes[1][1])], cwd=REPO, check=False)
        return
    per_task: dict[str, float] = {}  # label -> bytes per task at the largest job measured so far
    sizes: dict[str, list[tuple[str, int, int]]] = {}  # label -> (job, tasks, cached peak RSS) per job
    rows: list[str] = []
    after_rows: dict[str, dict] = {}  # job -> the current code's row, for the targets table
    header = (
        f"{'ranks':>5} {'code':<8} {'M tasks':>7} {'cold s':>8} {'cached s':>8} {'CPU s':>7} {'replay s':>8} "
        f"{'sim s':>6} {'Mt/s wall':>8} {'Mt/s CPU':>8} {'Mt/s sim':>8} {'RSS GiB':>7} {'B/task':>7} "
        f"{'estimate s':>8}"
    )
    states: list[MachineState] = []
    if not args.parse_only:
        states += report_machine("at the start")
        print(header, flush=True)
    else:
        names = []
    for name in names:
        job = synth(name)
        for label, code in codes:
            expected = tasks_hint(name)
            if label in per_task and per_task[label] * expected > max_bytes:
                line = (
                    f"{name:>5} {label:<8} skipped: {per_task[label]:.0f} B/task at the smaller job projects "
                    f"{per_task[label] * expected / 2**30:.1f} GiB > {args.max_gb:g} GiB (does not fit)"
                )
            else:
                first = label == "after" and not after_rows  # the smallest job: its graph's bytes too
                row = measure(
                    code,
                    label,
                    job,
                    name,
                    max_bytes,
                    args.timeout,
                    args.keep_cache,
                    args.repeat,
                    graph_bytes=first,
                )
                if label == "after":
                    after_rows[name] = row
                if "error" not in row:
                    per_task[label] = row["cached"].rss / max(row["tasks"], 1)
                    sizes.setdefault(label, []).append((name, row["tasks"], row["cached"].rss))
                line = fmt(label, name, row)
            rows.append(line)
            print(line, flush=True)
    for label, measured in sizes.items():
        print(linearity(label, measured), flush=True)
    if after_rows:
        floor = measure_floor(REPO, max_bytes, args.timeout, args.repeat)
        print("\n" + floor_line(floor), flush=True)
        states += report_machine("after the jobs")
        # the charge is named if either probe met it: the machine can change during the run
        charged = next((m for m in states if m.charges_fresh_memory), states[0] if states else None)
        print(targets(after_rows, sizes.get("after", []), floor, charged), flush=True)
    parse_names = [n.strip() for n in args.parse_jobs.split(",") if n.strip()]
    if parse_names:
        print("\ncold parse (load_job into an empty cache folder, fresh process per run):", flush=True)
    for name in parse_names:
        for label, code in codes:
            parse_table(code, label, name, synth(name), args)
    if not args.no_baseline:  # the detached worktree is registered in the repository: remove it
        subprocess.run(["git", "worktree", "remove", "--force", str(codes[1][1])], cwd=REPO, check=False)
    if args.parse_only:
        return
    print(
        "\ncold = first run with an empty cache (JSON parse included); cached = second run (wall and CPU "
        "seconds of the whole command, process start to exit: interpreter start-up and imports, load, graph, "
        "simulation, critical paths, report, exit); replay s and sim s are inside the cached run; Mt/s = "
        "million tasks per second of the cached command, by wall and by CPU time (the CPU figure is the one "
        "to trust on a shared, loaded machine); the indented lines split the same cached run by its own "
        "stage timers: the in-process pipeline (first stage to the report) and what lies outside it; "
        "B/task = the cached run's peak RSS / tasks (the 'peak RSS vs tasks' lines: the cost of each extra "
        "task between jobs and the fixed part it includes); estimate = `lumos estimate --dp 16` (cached "
        f"columns; target at 512 ranks <= {ESTIMATE_TARGET_S:g} s; estimate() = the part after the load "
        "and the graph build); machine state = what the machine charged in this run (fresh memory per 4 KiB "
        "page, the same touched again, a fixed Python loop; machine_state.py). Synthetic jobs: speed and "
        "memory only."
    )


if __name__ == "__main__":
    main()
