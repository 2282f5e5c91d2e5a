"""The scale benchmark's jobs and runs: synthetic jobs generated once into the temp directory, each run
a separate ``python -m lumos_core`` process with its own cache folder, timed from outside (wall, CPU
and peak RSS from ``wait4``) and killed past the memory or time limit."""

from __future__ import annotations

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


def tasks_hint(name: str) -> int:
    """Tasks of each job (as replayed), to project memory before running it."""
    return {"64": 929_536, "256": 3_718_144, "512": 14_793_216}[name]


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


def supports(code: Path, option: str) -> bool:
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
    if supports(code, "--no-holdout"):  # the hold-out evaluation is a separate, opt-in analysis
        replay_args.append("--no-holdout")
    if supports(code, "--timings"):  # the stage timers, for the in-process figures
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
