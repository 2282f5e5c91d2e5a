"""The issue's engine targets, each marked met or not from the figures a run measured (the table), and
the one verdict per job under the reading of the issue this project settled on."""

from __future__ import annotations

from machine_state import MachineState

from scale.jobs import Run

ESTIMATE_TARGET_S = 30.0  # `lumos estimate --dp 16` of the 512-rank job, cache warm
RATE_TARGET = 1e6  # tasks/s end to end on 2 cores
BYTES_TARGET = 250  # peak bytes per task, linear in tasks
SIM_TARGET = 10e6  # tasks/s of the simulation alone
WALL_512_S, RSS_512 = 60.0, 8 * 10**9  # the 512-rank 175B job end to end


def pipeline_seconds(run: Run) -> float | None:
    """Wall seconds of the in-process pipeline (cached load to report) by the run's own stage
    timers; None for code without ``--timings``."""
    return (((run.out or {}).get("timings") or {}).get("pipeline") or {}).get("wall_s")


def simulation_rate(run: Run, n: int) -> float:
    """Tasks per second of the simulation alone, by the run's own figure."""
    return n / max((run.out or {}).get("simulate_seconds", 0), 1e-9)


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
