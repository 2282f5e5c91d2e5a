"""What every run pays before its first task (the runtime floor: the same command on a job of a few
thousand tasks) and what the machine charges now (``machine_state.py``, in a fresh process)."""

from __future__ import annotations

import shutil
from pathlib import Path

from machine_state import MachineState, probe

from scale.jobs import ROOT, Run, median_run, run_cli, synth


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
