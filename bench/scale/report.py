"""The lines of the scale table: one per job and code, the in-process split of the cached run, peak
memory as a line in tasks, and the estimate's figure."""

from __future__ import annotations

from scale.jobs import Run
from scale.verdicts import simulation_rate


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


def estimate_figure(est: Run) -> str:
    """``lumos estimate --dp 16``: wall and CPU seconds of the command, its peak RSS, and the part
    inside ``estimate()`` (replay of the traced graph, re-timing, the predicted replay and timelines;
    the rest is start-up, load and the graph build)."""
    if est.error:
        return f" {est.error}"
    inner = (est.out or {}).get("seconds")
    inside = f", estimate() {inner:.1f} s" if inner is not None else ""
    return f"{est.wall:8.1f} ({est.cpu:.1f} CPU, {est.rss / 2**30:.2f} GiB{inside})"
