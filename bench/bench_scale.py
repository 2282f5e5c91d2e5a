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
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
from common import REPO
from machine_state import MachineState, probe

# The commit before the compiled graph kernels: the "before" column.
DEFAULT_BASELINE = "ddefb65"
ROOT = Path(tempfile.gettempdir()) / "lumos-bench-scale"

JOBS = {
    "64": ("gpt3-15b", ["--tp", "8", "--pp", "4", "--dp", "2", "--microbatches", "8"]),
    "256": ("gpt3-15b", ["--tp", "8", "--pp", "4", "--dp", "8", "--microbatches", "8"]),
    "512": ("gpt3-175b", ["--tp", "8", "--pp", "8", "--dp", "8"]),
    # The runtime floor: the same command on a job of a few thousand tasks (8 ranks, 2 layers) costs
    # what every run pays before its first task: the interpreter, the imports, numba and the loading
    # of its compiled kernels, the exit. Not one of --jobs: measured once per run, with the current code.
    "floor": ("gpt3-15b", ["--layers", "2", "--tp", "2", "--pp", "2", "--dp", "2", "--microbatches", "2"]),
}


@dataclass
class Run:
    wall: float = 0.0
    cpu: float = 0.0  # user + system seconds of the command (and the workers it waited for)
    sys_cpu: float = 0.0  # the system seconds among them (page faults land here)
    rss: int = 0  # bytes
    out: dict | None = None
    error: str = ""
    started_at: float = 0.0  # unix time just before the process was started
    ended_at: float = 0.0  # unix time once it was reaped


def synth(name: str) -> Path:
    """The job's folder in the temp directory, generated the first time."""
    model, extra = JOBS[name]
    folder = ROOT / "jobs" / f"{name}-{model}"
    done = folder / ".complete"
    if not done.exists():
        if folder.exists():
            shutil.rmtree(folder)
        print(
            f"synthesising the {name if name == 'floor' else name + '-rank'} job into {folder} (once) ...",
            flush=True,
        )
        cmd = [sys.executable, "-m", "lumos_core", "synth", str(folder), "--model", model, *extra]
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        done.write_text("ok")
    return folder


def baseline_tree(ref: str) -> Path:
    """A detached worktree of ``ref`` whose code the "before" runs import (removed at the end)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = ROOT / f"baseline-{sha}"
    if not (tree / "lumos_core").exists():
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=False)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), sha], cwd=REPO, check=True, capture_output=True
        )
    return tree


def run_cli(code: Path, args: list[str], cache: Path, max_bytes: int, timeout: float) -> Run:
    """``python -m lumos_core ARGS`` importing the code in ``code``; wall time and its own peak RSS."""
    import psutil

    env = dict(os.environ, PYTHONPATH=str(code), LUMOS_CACHE_DIR=str(cache))
    # Bytecode cached (in __pycache__, ignored by git), as an installed package has it: with
    # PYTHONDONTWRITEBYTECODE set in the shell every run would compile the project's modules again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started_at = time.time()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "lumos_core", *args],
        cwd=code,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    killed: list[str] = []

    def watch() -> None:  # never let a run take the shared machine's memory
        proc = psutil.Process(p.pid)
        while p.poll() is None:
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                return
            if rss > max_bytes or time.perf_counter() - t0 > timeout:
                killed.append(f"killed at {rss / 2**30:.1f} GiB after {time.perf_counter() - t0:.0f} s")
                p.kill()
                return
            time.sleep(0.2)

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    out_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: out_chunks.append(p.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    err = p.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(p.pid, 0)
    # the end, before joining the watchdog: it may sleep up to 0.2 s more before it notices
    wall, ended_at = time.perf_counter() - t0, time.time()
    p.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    w.join()
    run = Run(
        wall=wall, cpu=usage.ru_utime + usage.ru_stime, sys_cpu=usage.ru_stime, rss=usage.ru_maxrss * 1024
    )
    run.started_at, run.ended_at = started_at, ended_at
    if killed:
        run.error = killed[0]
    elif p.returncode != 0:
        run.error = f"exit {p.returncode}: {err.decode(errors='replace').strip().splitlines()[-1:]}"
    else:
        try:
            run.out = orjson.loads(b"".join(out_chunks))
        except orjson.JSONDecodeError:
            run.error = "no JSON on stdout"
    return run


def _supports(code: Path, option: str) -> bool:
    """Whether ``lumos replay`` of the code in ``code`` knows ``option``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", "replay", "--help"],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
    )
    return option in out.stdout


GRAPH_BYTES = """
import dataclasses, json, sys
import numpy as np
from lumos_core.graph.build import build_graph
from lumos_core.trace.loader import load_job
graph = build_graph(load_job(sys.argv[1]))
total = 0
for f in dataclasses.fields(graph):
    v = getattr(graph, f.name)
    arrays = [v] if isinstance(v, np.ndarray) else list(v.values()) if isinstance(v, dict) else []
    total += sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
print(json.dumps({'graph_bytes': total, 'nodes': int(graph.n_nodes)}))
"""


def median_run(runs: list[Run]) -> Run:
    """The median of ``runs`` by wall time stands for them (this machine's speed varies from run to
    run); its peak RSS is raised to the largest of them, so memory is never understated."""
    median = sorted(runs, key=lambda r: r.wall)[(len(runs) - 1) // 2]
    median.rss = max(r.rss for r in runs)
    return median


def measure(
    code: Path,
    label: str,
    job: Path,
    name: str,
    max_bytes: int,
    timeout: float,
    keep: bool,
    repeat: int = 1,
    graph_bytes: bool = False,
) -> dict:
    cache = ROOT / "cache" / f"{label}-{name}"
    reuse = keep and (cache / "ranks").is_dir() and any((cache / "ranks").iterdir())
    if not reuse:
        shutil.rmtree(cache, ignore_errors=True)
    replay_args = ["replay", str(job), "--json", "-q"]
    if _supports(code, "--no-holdout"):  # the hold-out evaluation is a separate, opt-in analysis
        replay_args.append("--no-holdout")
    if _supports(code, "--timings"):  # the stage timers, for the in-process figures
        replay_args.append("--timings")
    cold = (
        Run(error="cache kept from an earlier run")
        if reuse
        else run_cli(code, replay_args, cache, max_bytes, timeout)
    )
    if cold.error and not reuse:
        shutil.rmtree(cache, ignore_errors=True)
        return {"error": cold.error}
    runs = []
    for _ in range(max(repeat, 1)):
        cached = run_cli(code, replay_args, cache, max_bytes, timeout)
        if cached.error:
            return {"error": cached.error}
        runs.append(cached)
    cached = median_run(runs)
    est = run_cli(code, ["estimate", str(job), "--dp", "16", "--json", "-q"], cache, max_bytes, timeout)
    # the bytes of the execution graph's own arrays (from the cache filled above): what the job needs
    # at the least, beside the runtime floor (see :func:`targets`)
    graph = run_py(code, GRAPH_BYTES, [str(job)], cache, max_bytes, timeout) if graph_bytes else None
    if not keep:
        shutil.rmtree(cache, ignore_errors=True)
    row = {"cold": cold, "cached": cached, "estimate": est, "cached_walls": [r.wall for r in runs]}
    if graph is not None and not graph.error and graph.out:
        row["graph_bytes"] = graph.out["graph_bytes"]
    row["tasks"] = cached.out["tasks"] if cached.out else 0
    return row


def fmt(label: str, name: str, row: dict) -> str:
    if "error" in row:
        return f"{name:>5} {label:<8} {row['error']}"
    cold, cached, est = row["cold"], row["cached"], row["estimate"]
    n = row["tasks"]
    out = cached.out or {}
    rss = cached.rss
    est_s = estimate_figure(est)
    return (
        f"{name:>5} {label:<8} {n / 1e6:7.2f} {cold.wall if not cold.error else float('nan'):8.1f} "
        f"{cached.wall:8.1f} {cached.cpu:7.1f} "
        f"{out.get('seconds', 0):8.1f} {out.get('simulate_seconds', 0):6.2f} "
        f"{n / cached.wall / 1e6:8.2f} {n / max(cached.cpu, 1e-9) / 1e6:8.2f} "
        f"{simulation_rate(cached, n) / 1e6:8.1f} "
        f"{rss / 2**30:7.2f} {cached.rss / max(n, 1):7.0f} {est_s}" + in_process(cached, n)
    )


def pipeline_seconds(run: Run) -> float | None:
    """Wall seconds of the in-process pipeline (cached load to report) by the run's own stage
    timers; None for code without ``--timings``."""
    return (((run.out or {}).get("timings") or {}).get("pipeline") or {}).get("wall_s")


def simulation_rate(run: Run, n: int) -> float:
    """Tasks per second of the simulation alone, by the run's own figure."""
    return n / max((run.out or {}).get("simulate_seconds", 0), 1e-9)


def in_process(run: Run, n: int) -> str:
    """The cached run split by its own stage timers (``--timings``): start-up before the first
    stage, the pipeline from the cached load to the report, and the exit after it."""
    t = (run.out or {}).get("timings")
    if not t:
        return "\n" + " " * 15 + "in-process pipeline: n/a (this code has no --timings)"
    pipe = t["pipeline"]
    start_wall = t["first_stage_unix_time"] - run.started_at
    exit_wall = run.ended_at - t["last_stage_end_unix_time"]
    exit_cpu = run.cpu - t["process_cpu_s_before_first_stage"] - pipe["cpu_s"]
    start_cpu = t["process_cpu_s_before_first_stage"]
    stages = ", ".join(f"{k} {v['wall_s']:.2f}" for k, v in t["stages"].items())
    rate_wall = n / max(pipe["wall_s"], 1e-9) / 1e6
    rate_cpu = n / max(pipe["cpu_s"], 1e-9) / 1e6
    return (
        f"\n{'':15}in-process pipeline (cached load -> graph -> simulate -> critical paths -> breakdowns "
        f"-> report), same run: {pipe['wall_s']:.2f} s wall, {pipe['cpu_s']:.2f} CPU s = "
        f"{rate_wall:.2f} M tasks/s wall, {rate_cpu:.2f} by CPU"
        f"\n{'':15}outside it: start-up {start_wall:.2f} s wall ({start_cpu:.2f} CPU s: interpreter, "
        f"imports), exit {exit_wall:.2f} s wall ({exit_cpu:.2f} CPU s); stages (wall s): {stages}"
    )


def linearity(label: str, measured: list[tuple[str, int, int]]) -> str:
    """Peak RSS as a line in tasks: the bytes each extra task costs between consecutive jobs, and the
    fixed part (interpreter, numpy, numba and the code: what B/task at a small job mostly is) where
    that line meets zero tasks. The jobs are different models (15B, 175B), so it is approximate."""
    if len(measured) < 2:
        return f"{'':15}{label}: peak RSS vs tasks needs two jobs"
    steps = []
    for (a, na, ra), (b, nb, rb) in zip(measured, measured[1:]):
        slope = (rb - ra) / max(nb - na, 1)
        steps.append(f"{a}->{b} ranks {slope:.0f} B per extra task")
    (_, n0, r0), (_, n1, r1) = measured[0], measured[1]
    fixed = r0 - (r1 - r0) / max(n1 - n0, 1) * n0
    return f"{'':15}{label}: peak RSS vs tasks: {'; '.join(steps)}; fixed part ~{fixed / 2**20:.0f} MiB"


ESTIMATE_TARGET_S = 30.0  # `lumos estimate --dp 16` of the 512-rank job, cache warm
RATE_TARGET = 1e6  # tasks/s end to end on 2 cores
BYTES_TARGET = 250  # peak bytes per task, linear in tasks
SIM_TARGET = 10e6  # tasks/s of the simulation alone
WALL_512_S, RSS_512 = 60.0, 8 * 10**9  # the 512-rank 175B job end to end


def measure_floor(code: Path, max_bytes: int, timeout: float, repeat: int) -> Run:
    """The cached replay of the floor job (see ``JOBS``), the median of ``repeat`` runs (at least 3;
    peak RSS: the largest); its ``out`` holds the tasks."""
    job = synth("floor")
    cache = ROOT / "cache" / "runtime-floor"
    shutil.rmtree(cache, ignore_errors=True)
    replay_args = ["replay", str(job), "--json", "-q", "--no-holdout"]
    first = run_cli(code, replay_args, cache, max_bytes, timeout)  # parses and fills the cache: untimed
    if first.error:
        return first
    runs = [run_cli(code, replay_args, cache, max_bytes, timeout) for _ in range(max(repeat, 3))]
    shutil.rmtree(cache, ignore_errors=True)
    bad = [r for r in runs if r.error]
    if bad:
        return bad[0]
    return median_run(runs)


def report_machine(when: str) -> list[MachineState]:
    """Probe the machine (:mod:`machine_state`) and print what it charges now; the state, if any."""
    state = probe()
    print(state if isinstance(state, str) else state.line(when), flush=True)
    return [] if isinstance(state, str) else [state]


def floor_line(floor: Run) -> str:
    if floor.error:
        return f"runtime floor: {floor.error}"
    n = (floor.out or {}).get("tasks", 0)
    return (
        f"runtime floor (the same cached `lumos replay` of an 8-rank job of {n:,} tasks, median): "
        f"{floor.wall:.2f} s wall, {floor.cpu:.2f} CPU s, peak {floor.rss / 2**20:.0f} MiB"
    )


def targets(
    rows: dict[str, dict],
    sizes: list[tuple[str, int, int]],
    floor: Run | None = None,
    machine: MachineState | None = None,
) -> str:
    """The issue's engine targets against the current code's figures, job by job, under both
    readings of "end to end": the whole command (process start to exit, the interpreter, imports and
    numba's loading of the compiled kernels included) and the in-process pipeline the target names
    (cached load -> graph -> simulate -> critical path -> breakdowns -> report); and peak memory both
    as peak RSS / tasks and as the cost of each extra task (the slope between jobs). With the runtime
    ``floor`` (see :func:`measure_floor`): what the whole command costs above it, per task, and what
    the floor alone is at each job's tasks (a whole-command target the floor uses up cannot be met by
    the engine, only by a lighter runtime). With a ``machine`` state that charges extra for fresh
    memory (:mod:`machine_state`): each job's system time, where that charge lands."""

    def mark(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = ["\ntargets (current code; the cached run shown above):"]
    slopes = {b: (rb - ra) / max(nb - na, 1) for (a, na, ra), (b, nb, rb) in zip(sizes, sizes[1:])}
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"{name:>5}  {row['error']}")
            continue
        n, cached = row["tasks"], row["cached"]
        whole = n / cached.wall
        pipe = pipeline_seconds(cached)
        sim = simulation_rate(cached, n)
        per_task = cached.rss / max(n, 1)
        parts = [
            f"whole command {whole / 1e6:.2f} M tasks/s {mark(whole >= RATE_TARGET)}",
            (
                f"in-process {n / pipe / 1e6:.2f} {mark(n / pipe >= RATE_TARGET)}"
                if pipe
                else "in-process n/a"
            ),
            f"simulation {sim / 1e6:.1f} {mark(sim >= SIM_TARGET)}",
            f"peak/tasks {per_task:.0f} B {mark(per_task <= BYTES_TARGET)}",
        ]
        if name in slopes:
            parts.append(f"per extra task {slopes[name]:.0f} B {mark(slopes[name] <= BYTES_TARGET)}")
        if name == "512":
            parts.append(f"wall {cached.wall:.1f} s {mark(cached.wall <= WALL_512_S)}")
            parts.append(f"peak {cached.rss / 1e9:.2f} GB {mark(cached.rss <= RSS_512)}")
            est = row["estimate"]
            if not est.error:
                parts.append(f"estimate --dp 16 {est.wall:.1f} s {mark(est.wall <= ESTIMATE_TARGET_S)}")
        if floor is not None and not floor.error and cached.wall > floor.wall:
            parts.append(
                f"above the runtime floor {n / (cached.wall - floor.wall) / 1e6:.2f} M tasks/s, "
                f"{(cached.rss - floor.rss) / max(n, 1):.0f} B/task (the floor alone: "
                f"{floor.wall / (n / RATE_TARGET):.0%} of the time and {floor.rss / max(n, 1) / BYTES_TARGET:.0%} "
                "of the memory the targets allow this job)"
            )
        if floor is not None and not floor.error and "graph_bytes" in row:
            budget = BYTES_TARGET * n
            both = floor.rss + row["graph_bytes"]
            parts.append(
                f"the graph's own arrays {row['graph_bytes'] / 2**20:.1f} MiB ({row['graph_bytes'] / max(n, 1):.0f} "
                f"B/task): with the floor {both / 2**20:.0f} MiB, {both / budget:.0%} of the {budget / 2**20:.0f} MiB "
                "that 250 B/task allows"
            )
        if machine is not None and machine.charges_fresh_memory:
            parts.append(
                f"system time {cached.sys_cpu:.2f} of its {cached.cpu:.2f} CPU s (where the machine's charge "
                "for fresh memory lands)"
            )
        walls = row.get("cached_walls") or []
        spread = (
            f" (cached walls {min(walls):.2f}-{max(walls):.2f} s over {len(walls)} runs)"
            if len(walls) > 1
            else ""
        )
        lines.append(f"{name:>5}  " + "; ".join(parts) + spread)
        misses = issue_reading_misses(name, row, slopes.get(name), floor)
        timed = {"speed (in-process)", "simulation", "512-rank wall", "estimate --dp 16"}
        caveat = (
            " (timed on a machine that charges extra for fresh memory: a time missed here may be the machine's)"
            if machine is not None and machine.charges_fresh_memory and timed & set(misses)
            else ""
        )
        lines.append(
            f"{'':>5}  the issue's reading (the stages it names; memory per task above the runtime floor and "
            f"per extra task): {'all met' if not misses else 'NOT met: ' + ', '.join(misses)}{caveat}"
        )
    return "\n".join(lines)


def issue_reading_misses(name: str, row: dict, slope: float | None, floor: Run | None) -> list[str]:
    """The targets a job misses under the reading of the issue this project settled on.

    The issue defines end to end as "cached load -> graph -> simulate -> critical path -> breakdowns
    -> report": the in-process pipeline its stage timers measure, which leaves out the interpreter's
    start-up, the imports and the exit. And it asks for "<= 250 bytes per task peak memory, linear in
    tasks": the peak above the runtime floor (what a process of this runtime holds before its first
    task: Python, numpy, numba's compiler) per task, and the cost of each extra task between jobs. The
    512-rank wall, peak and estimate targets are whole commands, as the issue words them. A job
    whose pipeline time or floor is missing cannot be judged and counts as missed."""
    n, cached = row["tasks"], row["cached"]
    pipe = pipeline_seconds(cached)
    misses = []
    if not pipe or n / pipe < RATE_TARGET:
        misses.append("speed (in-process)")
    if simulation_rate(cached, n) < SIM_TARGET:
        misses.append("simulation")
    if floor is None or floor.error or (cached.rss - floor.rss) / max(n, 1) > BYTES_TARGET:
        misses.append("memory above the floor")
    if slope is not None and slope > BYTES_TARGET:
        misses.append("memory per extra task")
    if name == "512":
        est = row["estimate"]
        if cached.wall > WALL_512_S:
            misses.append("512-rank wall")
        if cached.rss > RSS_512:
            misses.append("512-rank peak")
        if est.error or est.wall > ESTIMATE_TARGET_S:
            misses.append("estimate --dp 16")
    return misses


def estimate_figure(est: Run) -> str:
    """``lumos estimate --dp 16``: wall and CPU seconds of the command, its peak RSS, and the part
    inside ``estimate()`` (replay of the traced graph, re-timing, the predicted replay and timelines;
    the rest is start-up, load and the graph build)."""
    if est.error:
        return f" {est.error}"
    inner = (est.out or {}).get("seconds")
    inside = f", estimate() {inner:.1f} s" if inner is not None else ""
    return f"{est.wall:8.1f} ({est.cpu:.1f} CPU, {est.rss / 2**30:.2f} GiB{inside})"


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
            expected = _tasks_hint(name)
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


# ------------------------------------------------------------------------- cold parse vs the floor

FLOOR = """
import gc, gzip, json, sys, time, orjson
files = sys.argv[1:]
wall = cpu = 0.0
raw = 0
for f in files:
    t, c = time.perf_counter(), time.process_time()
    data = open(f, 'rb').read()
    if data[:2] == b'\\x1f\\x8b':
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    wall += time.perf_counter() - t
    cpu += time.process_time() - c
    raw += len(data)
    del doc, data
    gc.collect()  # outside the timed part: each file starts from a clean heap
print(json.dumps({'wall': wall, 'cpu': cpu, 'json_bytes': raw}))
"""

PARSE = """
import json, os, resource, sys, time
engine, workers, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from lumos_core.trace.loader import load_job
parser = None
ray_start = 0.0
if engine == 'ray':
    from lumos_core.sweep.ray_load import RayParser
    parser = RayParser(jobs=workers or None)
    t = time.perf_counter()
    parser.engine.connect()  # Ray's own start-up, reported apart from the parse
    ray_start = time.perf_counter() - t
def tree_cpu():  # Ray's processes (workers, raylet, GCS) are not waited for: read them while alive
    import psutil
    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total
tree0 = tree_cpu() if parser is not None else 0.0
load0 = os.getloadavg()[0]
last = [0.0]
def on_file(f, state, detail):
    if state in ('loaded', 'failed'):
        last[0] = time.perf_counter()
t0 = time.perf_counter()
c0 = time.process_time()
job = load_job(folder, use_cache=True, workers=workers or None, parser=parser, on_file=on_file)
cpu = time.process_time() - c0
if parser is not None:
    cpu += tree_cpu() - tree0
    parser.close()
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({'parse_wall': last[0] - t0, 'cpu': cpu + ch.ru_utime + ch.ru_stime, 'ranks': len(job.ranks),
                  'skipped': len(job.skipped), 'ray_start': ray_start,
                  'load': [round(load0, 1), round(os.getloadavg()[0], 1)]}))
"""


def run_py(code: Path, script: str, args: list[str], cache: Path, max_bytes: int, timeout: float) -> Run:
    """``python -c SCRIPT ARGS`` importing the code in ``code``, its last stdout line as JSON."""
    import psutil

    env = dict(os.environ, PYTHONPATH=str(code), LUMOS_CACHE_DIR=str(cache))
    t0 = time.perf_counter()
    p = psutil.Popen(
        [sys.executable, "-c", script, *args],
        cwd=code,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return Run(error=f"killed after {timeout:.0f} s")
    run = Run(wall=time.perf_counter() - t0)
    if p.returncode != 0:
        run.error = f"exit {p.returncode}: {err.decode(errors='replace').strip().splitlines()[-1:]}"
        return run
    run.out = orjson.loads(out.strip().splitlines()[-1])
    return run


def parse_table(code: Path, label: str, name: str, job: Path, args: argparse.Namespace) -> None:
    """Cold parse of ``job`` (local engine, then Ray with each worker count) beside the floor."""
    files = sorted(str(f) for f in job.iterdir() if f.name.endswith((".json", ".json.gz")))
    step = max(1, -(-len(files) // args.floor_files))
    sample = files[::step]
    max_bytes = int(args.max_gb * 2**30)
    floor = run_py(code, FLOOR, sample, ROOT / "cache" / "floor", max_bytes, args.timeout)
    if floor.error or not floor.out:
        print(f"{name:>5} {label:<8} floor failed: {floor.error}")
        return
    scale = 1.0
    json_bytes = floor.out["json_bytes"]
    if len(sample) < len(files):  # scale the sample by the text of all files
        from lumos_core.trace.kineto_reader import text_bytes

        json_bytes = sum(text_bytes(Path(f)) for f in files)
        scale = json_bytes / sum(text_bytes(Path(f)) for f in sample)
    gib = json_bytes / 2**30
    f_wall, f_cpu = floor.out["wall"] * scale, floor.out["cpu"] * scale
    how = (
        f"all {len(files)} files" if scale == 1.0 else f"{len(sample)} of {len(files)} files, scaled by bytes"
    )
    print(
        f"{name:>5} {label:<8} {len(files)} files, {gib:.2f} GiB of JSON; floor (gzip + orjson.loads, "
        f"one process, {how}): {f_wall:.1f} s wall = {f_wall / gib:.1f} s/GiB, {f_cpu:.1f} CPU s = "
        f"{f_cpu / gib:.1f} CPU s/GiB, {f_cpu / max(f_wall, 1e-9):.2f} cores; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    runs = [("local", 0)] + [("ray", int(w)) for w in args.ray_workers.split(",") if w.strip()]
    for engine, workers in runs:
        cache = ROOT / "cache" / f"parse-{label}-{name}-{engine}{workers}"
        shutil.rmtree(cache, ignore_errors=True)
        r = run_py(code, PARSE, [engine, str(workers), str(job)], cache, max_bytes, args.timeout)
        shutil.rmtree(cache, ignore_errors=True)
        what = "local, default workers" if engine == "local" else f"--engine ray, {workers} local worker(s)"
        if r.error or not r.out:
            print(f"{name:>5} {label:<8}   {what}: {r.error}", flush=True)
            continue
        o = r.out
        wall = o["parse_wall"]
        # Cores = CPU s / wall s: the share of the machine the run got. On a shared machine the
        # kernel splits the cores between login sessions (autogroups) first, so the same work
        # gets a different share from run to run.
        cpu = (
            f", {o['cpu']:.1f} CPU s = {o['cpu'] / gib:.1f} CPU s/GiB = {o['cpu'] / f_cpu:.2f}x the floor's CPU, "
            f"{o['cpu'] / max(wall, 1e-9):.2f} cores"
        )
        if engine == "ray":
            cpu += f" (CPU: all Ray processes during the parse; + {o['ray_start']:.1f} s Ray start-up)"
        load = o.get("load")
        print(
            f"{name:>5} {label:<8}   {what}: cold parse {wall:.1f} s = {wall / gib:.1f} s/GiB "
            f"(target <= 12) = {wall / f_wall:.2f}x the floor's wall{cpu}; {o['ranks']} ranks"
            + (f", {o['skipped']} skipped" if o["skipped"] else "")
            + (f"; load {load[0]:g} -> {load[1]:g}" if load else ""),
            flush=True,
        )


def _tasks_hint(name: str) -> int:
    """Tasks of each job (as replayed), to project memory before running it."""
    return {"64": 929_536, "256": 3_718_144, "512": 14_793_216}[name]


if __name__ == "__main__":
    main()
