"""Replay benchmark (issue 3): graph build and simulation speed on every shared trace with GPU work
and on a large graph made by tiling the 8-rank nanogpt graph, plus the replay error table.

Baselines measured in the same process:
- ``floor``: one Python pass that only reads every node's dependencies (the least any per-edge
  Python loop can do); the simulation's cost over it is what its arithmetic adds.
- ``event queue``: a textbook heapq discrete-event simulation of the same graph (SimPy style), which
  must agree with ours exactly; the ratio shows what the single topological pass saves.
Target: >= 1 M tasks/s for the replay itself on this 2-core machine; memory linear in tasks.

Usage: .venv/bin/python bench/bench_replay.py [--tile K]   (default K = 64: ~3.8 M tasks)
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import time
import tracemalloc

import numpy as np
from common import SHARED, shared_or_exit

from lumos_core.errors import FolderError, LumosError
from lumos_core.graph.build import build_graph
from lumos_core.graph.model import ExecutionGraph
from lumos_core.replay.run import replay
from lumos_core.replay.simulate import simulate
from lumos_core.trace.loader import discover_trace_files, load_job
from lumos_core.trace.model import Kind

TRACES = [
    "h100-nanogpt-8rank",
    "dlrm-v100-8rank",
    "a100-ddp-2rank",
    "h100-hf-inference",
    "hta-critical-path",
]


def tile(g: ExecutionGraph, k: int) -> ExecutionGraph:
    """``k`` independent copies of ``g`` in one graph (node ids shifted per copy)."""
    n = g.n_nodes

    def rep(a: np.ndarray) -> np.ndarray:
        return np.tile(a, k)

    def ptr(p: np.ndarray) -> np.ndarray:
        m = int(p[-1])
        return np.concatenate([[0]] + [p[1:] + i * m for i in range(k)])

    def ids(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a.astype(np.int64) + i * n for i in range(k)])

    return dataclasses.replace(
        g,
        rank=rep(g.rank),
        event=rep(g.event),
        node_type=rep(g.node_type),
        proc=rep(g.proc),
        dur=rep(g.dur),
        anchor=rep(g.anchor),
        measured_start=rep(g.measured_start),
        measured_end=rep(g.measured_end),
        sp_ptr=ptr(g.sp_ptr),
        sp_src=ids(g.sp_src),
        sp_lag=rep(g.sp_lag),
        sp_from_end=rep(g.sp_from_end),
        sp_kind=rep(g.sp_kind),
        ep_ptr=ptr(g.ep_ptr),
        ep_src=ids(g.ep_src),
        ep_lag=rep(g.ep_lag),
        ep_from_end=rep(g.ep_from_end),
        ep_kind=rep(g.ep_kind),
        order=ids(g.order),
        arrive_of=rep(g.arrive_of),
    )


def floor_pass(g: ExecutionGraph) -> int:
    """Visit every node and read each of its dependency sources once."""
    ptr = g.sp_ptr.tolist()
    src = g.sp_src.tolist()
    total = 0
    for v in g.order.tolist():
        for j in range(ptr[v], ptr[v + 1]):
            total += src[j]
    return total


def event_queue(g: ExecutionGraph) -> tuple[np.ndarray, np.ndarray]:
    """Heap-driven simulation: a node is released when its last dependency is done (start deps at
    their reference time, end deps checked when it finishes)."""
    n = g.n_nodes
    sp_dst = g.sp_dst.tolist()
    ep_dst = g.ep_dst.tolist()
    sp_src, sp_end, sp_lag = g.sp_src.tolist(), g.sp_from_end.tolist(), g.sp_lag.tolist()
    ep_src, ep_end, ep_lag = g.ep_src.tolist(), g.ep_from_end.tolist(), g.ep_lag.tolist()
    out: list[list[int]] = [[] for _ in range(n)]
    for j, s in enumerate(sp_src):
        out[s].append(j)
    out_e: list[list[int]] = [[] for _ in range(n)]
    for j, s in enumerate(ep_src):
        out_e[s].append(j)
    waiting = (np.diff(g.sp_ptr) + np.diff(g.ep_ptr)).tolist()
    ready = g.anchor.tolist()
    end_min = [0] * n
    dur = g.dur.tolist()
    start = [0] * n
    end = [0] * n
    heap = [(ready[v], v) for v in range(n) if waiting[v] == 0]
    heapq.heapify(heap)
    while heap:
        t, v = heapq.heappop(heap)
        start[v] = t
        e = max(t + dur[v], end_min[v])
        end[v] = e
        for j in out[v]:
            w = sp_dst[j]
            x = (e if sp_end[j] else t) + sp_lag[j]
            if x > ready[w]:
                ready[w] = x
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(heap, (ready[w], w))
        for j in out_e[v]:
            w = ep_dst[j]
            x = (e if ep_end[j] else t) + ep_lag[j]
            if x > end_min[w]:
                end_min[w] = x
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(heap, (ready[w], w))
    return np.asarray(start, np.int64), np.asarray(end, np.int64)


def timed(fn, *args, repeat: int = 3):  # type: ignore[no-untyped-def]
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t)
    return best, out


def _jobs() -> list[tuple[str, object]]:
    """Each trace folder as one job; folders of unrelated single-rank traces file by file."""
    out = []
    for name in TRACES:
        path = SHARED / name
        if not path.exists():
            continue
        try:
            load_job(path)
            out.append((name, path))
        except FolderError:
            for f in discover_trace_files(path):
                if has_gpu_work(f):
                    out.append((f"{name}/{f.name[:24]}", f))
    return out


def has_gpu_work(path: object) -> bool:
    try:
        job = load_job(path)
    except LumosError:
        return False
    return any(np.count_nonzero(np.isin(t.kind, [Kind.KERNEL, Kind.MEMCPY])) for t in job.ranks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tile", type=int, default=64)
    args = ap.parse_args()
    shared_or_exit()

    print("replay error per trace (all ranks together):")
    print(
        f"{'trace':40s} {'ranks':>5s} {'tasks':>9s} {'build s':>8s} {'sim s':>7s} {'M tasks/s':>9s} {'error %':>8s}"
    )
    graphs = {}
    for name, path in _jobs():
        job = load_job(path)
        t = time.perf_counter()
        g = build_graph(job)
        build = time.perf_counter() - t
        sim, _ = timed(simulate, g)
        r = replay(job, graph=g, critical_paths=False)
        graphs[name] = g
        print(
            f"{name:40s} {len(job.ranks):5d} {g.n_tasks:9d} {build:8.2f} {sim:7.3f} "
            f"{g.n_tasks / sim / 1e6:9.2f} {r.mean_abs_error_pct:8.3f}"
        )

    g0 = graphs["h100-nanogpt-8rank"]
    big = tile(g0, args.tile)
    print(
        f"\ntiled graph: nanogpt x {args.tile} = {big.n_tasks:,} tasks, {big.n_nodes:,} nodes, "
        f"{len(big.sp_src) + len(big.ep_src):,} edges"
    )
    t_floor, _ = timed(floor_pass, big, repeat=1)
    t_sim, (s, _e) = timed(simulate, big, repeat=1)
    small_s, _ = simulate(g0)
    assert np.array_equal(s[: g0.n_nodes], small_s), "tiling changed the replay"
    print(f"  simulate:    {t_sim:6.2f} s  {big.n_tasks / t_sim / 1e6:5.2f} M tasks/s")
    print(f"  floor pass:  {t_floor:6.2f} s  ratio simulate/floor {t_sim / t_floor:4.2f}x")
    # Memory (tracemalloc slows allocation a lot, so it is measured apart from the timing).
    for k in (max(args.tile // 8, 1), max(args.tile // 4, 1)):
        part = tile(g0, k)
        tracemalloc.start()
        simulate(part)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(
            f"  simulation memory at {part.n_nodes:,} nodes: {peak / 2**20:7.1f} MiB = {peak / part.n_nodes:4.0f} B/node"
        )

    t_q, (qs, qe) = timed(event_queue, g0, repeat=1)
    t_s, (ss, se) = timed(simulate, g0, repeat=3)
    same = np.array_equal(qs, ss) and np.array_equal(qe, se)
    print(
        f"\nevent-queue baseline on nanogpt: {t_q:.2f} s vs ours {t_s:.3f} s "
        f"({t_q / t_s:.1f}x faster; identical result: {same})"
    )


if __name__ == "__main__":
    main()
