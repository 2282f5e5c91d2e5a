"""Grid sweep throughput on the real 8-rank H100 nanoGPT job.

1. A grid of 480 configurations (DP 8..1024 x 5 GPU profiles x 2 NVLink x 3 network bandwidths x
   PP 1, 2): the 240 with PP 2 are skipped with their reason (the trace has no layer structure to
   split), the other 240 are estimated with the local engine on 1 and 2 worker processes and with
   the Ray engine on a local Ray instance of 2 CPUs. Prints configurations per second, the speed-up
   of 2 workers over 1, Ray's overhead against the process pool (start of the instance apart), and
   checks that all three gave identical rows.
2. The issue's grid (``dp=8,16,32,64 pp=1,2,4 microbatches=4,8,16``) with both engines (``--issue``).

Usage: .venv/bin/python bench/bench_sweep.py [--quick] [--issue]
"""

from __future__ import annotations

import argparse
import time

from common import shared_or_exit

from lumos_core.graph.build import build_graph
from lumos_core.sweep.engines import LocalEngine, RayEngine
from lumos_core.sweep.grid import parse_grid
from lumos_core.sweep.run import SweepReport, run_grid
from lumos_core.trace.loader import load_job
from lumos_core.whatif.baseline import infer_baseline

GRID = "dp=8-1024 gpu=H100,H200,A100,B200,V100 nvlink_gbps=300,900 network_gbps=25,50,100 pp=1,2"
QUICK = "dp=8-64 gpu=H100,A100 nvlink_gbps=300,900 network_gbps=25,50 pp=1,2"
ISSUE = "dp=8,16,32,64 pp=1,2,4 microbatches=4,8,16"


def same(a: SweepReport, b: SweepReport) -> bool:
    return len(a.rows) == len(b.rows) and all(x.same_numbers(y) for x, y in zip(a.rows, b.rows))


def line(label: str, r: SweepReport) -> str:
    rate = r.estimated / r.seconds
    return (
        f"  {label:<28} {r.estimated:4d} estimated {r.skipped:4d} skipped  {r.seconds:7.1f} s  "
        f"{rate:6.2f} configs/s  ({1 / rate:.3f} s per configuration)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a 64-configuration grid instead")
    ap.add_argument("--issue", action="store_true", help="also time the issue's grid with both engines")
    args = ap.parse_args()
    path = shared_or_exit("h100-nanogpt-8rank")
    job = load_job(path)
    baseline = infer_baseline(job)
    t0 = time.perf_counter()
    graph = build_graph(job)
    print(
        f"nanogpt: {len(job.ranks)} ranks, graph of {graph.n_nodes} tasks built in {time.perf_counter() - t0:.2f} s"
    )

    grid = parse_grid(QUICK if args.quick else GRID)
    print(f"grid: {grid.describe()}")
    one = run_grid(job, grid, LocalEngine(1), baseline=baseline, graph=graph)
    print(line("local, 1 worker", one))
    two = run_grid(job, grid, LocalEngine(2), baseline=baseline, graph=graph)
    print(line("local, 2 workers", two))
    ray_engine = RayEngine(jobs=2)
    t0 = time.perf_counter()
    ray_engine.connect()
    start_s = time.perf_counter() - t0
    on_ray = run_grid(job, grid, ray_engine, baseline=baseline, graph=graph)
    ray_engine.close()
    print(line("ray (local, 2 CPUs)", on_ray) + f"  + {start_s:.1f} s to start Ray")
    skipped = next(r for r in one.rows if not r.ok)
    print(f"  e.g. skipped {skipped.key}: {skipped.note}")
    print()
    print(f"2 workers vs 1: x{one.seconds / two.seconds:.2f} configs/s")
    print(
        f"Ray overhead vs the process pool (2 workers each): {100 * (on_ray.seconds / two.seconds - 1):+.1f} % "
        f"({on_ray.seconds - two.seconds:+.1f} s) without the start of Ray, "
        f"{100 * ((on_ray.seconds + start_s) / two.seconds - 1):+.1f} % with it"
    )
    print(f"identical rows: 1 vs 2 workers {same(one, two)}, pool vs Ray {same(two, on_ray)}")

    if args.issue:
        grid = parse_grid(ISSUE)
        print(f"\nissue grid: {grid.describe()}")
        local = run_grid(job, grid, LocalEngine(2), baseline=baseline, graph=graph)
        print(line("local, 2 workers", local))
        ray_engine = RayEngine(jobs=2)
        t0 = time.perf_counter()
        on_ray = run_grid(job, grid, ray_engine, baseline=baseline, graph=graph)
        ray_engine.close()
        print(
            line("ray (local, 2 CPUs)", on_ray)
            + f"  ({time.perf_counter() - t0:.1f} s with the start of Ray)"
        )
        print(f"identical rows: {same(local, on_ray)}")


if __name__ == "__main__":
    main()
