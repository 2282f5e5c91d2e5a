"""Estimate benchmark (issue 4): predict h100-nanogpt-8rank at 8 -> 512 ranks (DP 512), write the
predicted Kineto folder, and open it with `lumos inspect` in a fresh process.

Baseline measured in the same run: the replay of the traced job itself (what an identity estimate
costs), so the ratio says how much a 64x larger job adds. Target: the 512-rank estimate (with its
export) under 60 s on this 2-core machine; the exported folder loads.

Also prints the data-parallel scaling curve (paper Figure 7a's shape: grows slowly with DP).

Usage: .venv/bin/python bench/bench_estimate.py [--ranks 512]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, shared_or_exit

from lumos_core.graph.build import build_graph
from lumos_core.replay.run import replay
from lumos_core.trace.loader import load_job
from lumos_core.whatif.estimate import estimate
from lumos_core.whatif.export import write_job


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=512)
    args = ap.parse_args()
    folder = shared_or_exit("h100-nanogpt-8rank")
    job = load_job(folder)
    t = time.perf_counter()
    graph = build_graph(job)
    replay(job, graph=graph, critical_paths=False)
    t_replay = time.perf_counter() - t
    print(f"baseline: load + replay of the 8 traced ranks {t_replay:.2f} s")

    print("\nDP scaling (8 traced ranks; nothing else changes):")
    print(f"{'ranks':>6s} {'iteration ms':>13s} {'change':>8s} {'exposed comm ms':>16s} {'estimate s':>11s}")
    for dp in (8, 16, 32, 64, 128, 256, 512):
        if dp > args.ranks:
            break
        r = estimate(job, {"dp": dp}, graph=graph)
        b = r.predicted.breakdown
        print(
            f"{dp:6d} {r.predicted.iteration_us / 1000:13.3f} "
            f"{100 * (r.predicted.iteration_us / r.replayed.iteration_us - 1):+7.2f}% "
            f"{b.exposed_comm_ns / 1e6:16.3f} {r.seconds:11.2f}"
        )

    with tempfile.TemporaryDirectory(prefix="lumos-bench-") as tmp:
        out = Path(tmp) / f"nanogpt-{args.ranks}"
        t = time.perf_counter()
        r = estimate(load_job(folder), {"dp": args.ranks})  # from the loaded job: graph built inside
        t_est = time.perf_counter() - t
        t = time.perf_counter()
        write_job(r.timeline, r.represents, out, r.world_size)
        t_write = time.perf_counter() - t
        size = sum(p.stat().st_size for p in out.iterdir())
        print(
            f"\n8 -> {args.ranks} ranks: estimate {t_est:.2f} s + export {t_write:.2f} s = "
            f"{t_est + t_write:.2f} s (target < 60 s; {(t_est + t_write) / t_replay:.1f}x the baseline replay); "
            f"{len(list(out.iterdir()))} files, {size / 2**20:.0f} MiB"
        )
        t = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "lumos_core", "inspect", "-q", "--no-cache", str(out)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        t_inspect = time.perf_counter() - t
        head = [ln for ln in p.stdout.splitlines() if ln.strip()][:3]
        print(f"lumos inspect of the exported folder: exit {p.returncode} in {t_inspect:.1f} s")
        for ln in head:
            print("   ", ln[:120])
        if p.returncode != 0:
            print(p.stderr[-2000:])
            sys.exit(1)


if __name__ == "__main__":
    main()
