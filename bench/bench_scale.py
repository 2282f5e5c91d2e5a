"""Scale benchmark: synthetic Megatron jobs of 64, 256 and 512 ranks replayed end to end.

Per job it prints: tasks, cold end-to-end replay (parse the JSON + graph + simulate + critical paths
+ breakdowns + report), cached end-to-end replay (columns from the cache), tasks/s, peak RSS and bytes
per task, and ``lumos estimate --dp 16`` time. The same figures are measured in the same run for
the code before the speed-up (a detached ``git worktree`` of ``--baseline-ref``), where it fits in
memory: a run is skipped when its bytes per task at a smaller job project it over ``--max-gb``, and
killed if it grows past it anyway.

Every run is a separate ``python -m lumos_core`` process (peak RSS from ``wait4``, so it is that
command's own), with its own cache folder. The synthetic jobs are written once into the temp
directory and reused (``lumos synth`` is deterministic); they are SYNTHETIC (our own cost models):
they measure speed and memory, never accuracy.

Targets: end to end >= 1 M tasks/s on 2 cores and <= 250 B/task; the 512-rank 175B job <= 60 s and
<= 8 GB; ``estimate --dp 16`` on it <= 30 s.

Usage: .venv/bin/python bench/bench_scale.py [--jobs 64,256,512] [--baseline-ref REF] [--no-baseline]
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

# The commit before the compiled graph kernels: the "before" column.
DEFAULT_BASELINE = "ddefb65"
ROOT = Path(tempfile.gettempdir()) / "lumos-bench-scale"

JOBS = {
    "64": ("gpt3-15b", ["--tp", "8", "--pp", "4", "--dp", "2", "--microbatches", "8"]),
    "256": ("gpt3-15b", ["--tp", "8", "--pp", "4", "--dp", "8", "--microbatches", "8"]),
    "512": ("gpt3-175b", ["--tp", "8", "--pp", "8", "--dp", "8"]),
}


@dataclass
class Run:
    wall: float = 0.0
    cpu: float = 0.0  # user + system seconds of the command (and the workers it waited for)
    rss: int = 0  # bytes
    out: dict | None = None
    error: str = ""


def synth(name: str) -> Path:
    """The job's folder in the temp directory, generated the first time."""
    model, extra = JOBS[name]
    folder = ROOT / "jobs" / f"{name}-{model}"
    done = folder / ".complete"
    if not done.exists():
        if folder.exists():
            shutil.rmtree(folder)
        print(f"synthesising the {name}-rank job into {folder} (once) ...", flush=True)
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
    p.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    w.join()
    run = Run(wall=time.perf_counter() - t0, cpu=usage.ru_utime + usage.ru_stime, rss=usage.ru_maxrss * 1024)
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


def measure(code: Path, label: str, job: Path, name: str, max_bytes: int, timeout: float, keep: bool) -> dict:
    cache = ROOT / "cache" / f"{label}-{name}"
    reuse = keep and (cache / "ranks").is_dir() and any((cache / "ranks").iterdir())
    if not reuse:
        shutil.rmtree(cache, ignore_errors=True)
    replay_args = ["replay", str(job), "--json", "-q"]
    if _supports(code, "--no-holdout"):  # the hold-out evaluation is a separate, opt-in analysis
        replay_args.append("--no-holdout")
    cold = (
        Run(error="cache kept from an earlier run")
        if reuse
        else run_cli(code, replay_args, cache, max_bytes, timeout)
    )
    if cold.error and not reuse:
        shutil.rmtree(cache, ignore_errors=True)
        return {"error": cold.error}
    cached = run_cli(code, replay_args, cache, max_bytes, timeout)
    if cached.error:
        return {"error": cached.error}
    est = run_cli(code, ["estimate", str(job), "--dp", "16", "--json", "-q"], cache, max_bytes, timeout)
    if not keep:
        shutil.rmtree(cache, ignore_errors=True)
    row = {"cold": cold, "cached": cached, "estimate": est}
    row["tasks"] = cached.out["tasks"] if cached.out else 0
    return row


def fmt(label: str, name: str, row: dict) -> str:
    if "error" in row:
        return f"{name:>5} {label:<8} {row['error']}"
    cold, cached, est = row["cold"], row["cached"], row["estimate"]
    n = row["tasks"]
    out = cached.out or {}
    rss = cached.rss
    est_s = (
        f"{est.wall:8.1f} ({est.cpu:.1f} CPU, {est.rss / 2**30:.2f} GiB)"
        if not est.error
        else f" {est.error}"
    )
    return (
        f"{name:>5} {label:<8} {n / 1e6:7.2f} {cold.wall if not cold.error else float('nan'):8.1f} "
        f"{cached.wall:8.1f} {cached.cpu:7.1f} "
        f"{out.get('seconds', 0):8.1f} {out.get('simulate_seconds', 0):6.2f} "
        f"{n / cached.wall / 1e6:8.2f} {n / max(cached.cpu, 1e-9) / 1e6:8.2f} "
        f"{n / max(out.get('simulate_seconds', 0), 1e-9) / 1e6:8.1f} "
        f"{rss / 2**30:7.2f} {cached.rss / max(n, 1):7.0f} {est_s}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default="64,256,512", help="comma-separated: 64, 256, 512")
    ap.add_argument("--baseline-ref", default=DEFAULT_BASELINE, help="git ref of the 'before' code")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--max-gb", type=float, default=8.0, help="never let one run exceed this RSS")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument(
        "--keep-cache",
        action="store_true",
        help="keep each job's parsed columns for the next run (which then skips the cold run)",
    )
    args = ap.parse_args()
    max_bytes = int(args.max_gb * 2**30)
    names = [n.strip() for n in args.jobs.split(",") if n.strip()]
    codes = [("after", REPO)]
    if not args.no_baseline:
        codes.append(("before", baseline_tree(args.baseline_ref)))
    per_task: dict[str, float] = {}  # label -> bytes per task at the largest job measured so far
    rows: list[str] = []
    header = (
        f"{'ranks':>5} {'code':<8} {'M tasks':>7} {'cold s':>8} {'cached s':>8} {'CPU s':>7} {'replay s':>8} "
        f"{'sim s':>6} {'Mt/s wall':>8} {'Mt/s CPU':>8} {'Mt/s sim':>8} {'RSS GiB':>7} {'B/task':>7} "
        f"{'estimate s':>8}"
    )
    print(header, flush=True)
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
                row = measure(code, label, job, name, max_bytes, args.timeout, args.keep_cache)
                if "error" not in row:
                    per_task[label] = row["cached"].rss / max(row["tasks"], 1)
                line = fmt(label, name, row)
            rows.append(line)
            print(line, flush=True)
    if not args.no_baseline:  # the detached worktree is registered in the repository: remove it
        subprocess.run(["git", "worktree", "remove", "--force", str(codes[1][1])], cwd=REPO, check=False)
    print(
        "\ncold = first run with an empty cache (JSON parse included); cached = second run (wall and CPU "
        "seconds of the whole command: start-up, load, graph, simulation, critical paths, report); replay "
        "s and sim s are inside the cached run; Mt/s = million tasks per second of the cached command, "
        "by wall and by CPU time (the CPU figure is the one to trust on a shared, loaded machine); "
        "B/task = the cached run's peak RSS / tasks; estimate = `lumos estimate --dp 16` (cached "
        "columns). Synthetic jobs: speed and memory only."
    )


def _tasks_hint(name: str) -> int:
    """Tasks of each job (as replayed), to project memory before running it."""
    return {"64": 929_536, "256": 3_718_144, "512": 25_878_272}[name]


if __name__ == "__main__":
    main()
