"""Estimates of one job through its Estimator (the traced configuration replayed once) against a
fresh ``estimate()`` per point (replayed every time: the code before the Estimator), in the same
run: a DP sweep of the nanoGPT 8-rank job, in this process, and ``lumos sweep`` with one worker.

    .venv/bin/python bench/bench_estimator.py [--points 8,16,32,64] [--repeat 3]

Prints seconds per sweep for both, the ratio, and whether every predicted number is the same.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from common import REPO, shared_or_exit

from lumos_core.graph.build import build_graph
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import infer_baseline
from lumos_core.whatif.estimate import Estimator, estimate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default="8,16,32,64", help="DP values (default 8,16,32,64)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    folder = shared_or_exit("h100-nanogpt-8rank")
    dps = [int(x) for x in args.points.split(",")]
    job = load_job(folder, workers=1)
    graph, base = build_graph(job), infer_baseline(job)
    estimate(job, {"dp": dps[0]}, baseline=base, graph=graph)  # compiles the kernels: not timed
    fresh, kept, same = [], [], True
    for _ in range(args.repeat):  # alternated, so machine noise hits both alike
        t = time.perf_counter()
        a = [estimate(job, {"dp": d}, baseline=base, graph=graph) for d in dps]
        fresh.append(time.perf_counter() - t)
        t = time.perf_counter()
        e = Estimator(job, baseline=base, graph=graph)
        b = [e.estimate({"dp": d}) for d in dps]
        kept.append(time.perf_counter() - t)
        same &= all(x.as_dict() | {"seconds": 0} == y.as_dict() | {"seconds": 0} for x, y in zip(a, b))
    f, k = statistics.median(fresh), statistics.median(kept)
    print(f"{len(dps)}-point DP sweep of {folder.name} in one process (median of {args.repeat}):")
    print(f"  estimate() per point (baseline replayed each time): {f:.3f} s")
    print(f"  one Estimator (baseline replayed once):             {k:.3f} s   ratio {f / k:.2f}x")
    print(f"  identical results: {same}")
    grid = "dp=" + ",".join(map(str, dps))
    cmd = [
        sys.executable,
        "-m",
        "lumos_core",
        "sweep",
        str(folder),
        "--grid",
        grid,
        "--jobs",
        "1",
        "--json",
        "-q",
    ]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
    print(
        f"lumos sweep --grid {grid} --jobs 1 (one worker, one Estimator): {time.perf_counter() - t:.2f} s wall"
    )


if __name__ == "__main__":
    main()
