"""Hold-out cost benchmark (issue 27): the whole ``lumos replay PATH`` command with the hold-out (the
default) against ``--no-holdout``, on every shared trace and on a synthetic single-rank trace of a
few MB whose steps differ a little (the shape that made the old quadratic diff take minutes).

Both commands run in this process's machine state, one after the other, each after a warm-up run
(the column cache and the compiled kernels are then shared); the figure is the ratio of the best of
``--repeat`` wall times. Target: hold-out <= 3x --no-holdout on every trace.

The synthetic trace checks cost and alignment on a known shape, never accuracy.

Usage: .venv/bin/python bench/bench_holdout.py [--repeat N] [--only NAME]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, SHARED

TARGET = 3.0
_SEPARATE = {"edge-cases", "h100-hf-inference", "hta-critical-path"}  # folders of unrelated traces


def synthetic_trace(path: Path, steps: int = 20, layers: int = 120, seed: int = 7) -> Path:
    """One rank, ``steps`` ProfilerSteps of a layered program on two streams: each step has a few
    data-dependent embedding lookups, allocator calls and sometimes an extra sync, in random places
    (real steps differ that way); the GPU runs behind the CPU."""
    rng = random.Random(seed)
    ev: list[dict] = []
    corr = [1000]
    t = 0.0
    gpu_free = {7: 0.0, 13: 0.0}

    def op(name: str, ts: float, dur: float) -> None:
        ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}})

    def launch(kernel: str, ts: float, kdur: float, stream: int = 7) -> float:
        corr[0] += 1
        c = corr[0]
        ev.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
             "dur": 4.0, "args": {"correlation": c}}
        )
        ks = max(ts + 6.0, gpu_free[stream]) + 1.0
        gpu_free[stream] = ks + kdur
        ev.append(
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": ks, "dur": kdur,
             "args": {"device": 0, "stream": stream, "correlation": c}}
        )
        return ts + 5.0

    for s in range(steps):
        start = t
        for layer in range(layers):
            for name, kdur in (("aten::linear", 18.0), ("aten::gelu", 6.0), ("aten::linear", 22.0),
                               ("aten::layer_norm", 5.0), ("aten::add", 3.0)):
                if rng.random() < 0.03:  # data-dependent work between ops
                    op("aten::embedding_bag", t, 8.0)
                    t = launch("embedding_bag_kernel", t + 1.0, 12.0 + rng.random() * 20) + 3.0
                if rng.random() < 0.02:
                    op("aten::empty", t, 2.0)
                    t += 3.0
                op(name, t, 9.0)
                t = launch(f"{name.split('::')[1]}_kernel", t + 1.0, kdur * (0.9 + 0.2 * rng.random())) + 4.0
                if layer % 10 == 9 and name == "aten::add":
                    t = launch("ncclKernel_AllReduce_RING_LL", t, 40.0, stream=13) + 2.0
            if rng.random() < 0.01:
                wait = max(gpu_free.values()) - t
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1,
                           "tid": 1, "ts": t, "dur": max(wait, 2.0), "args": {"correlation": 0}})
                t += max(wait, 2.0) + 1.0
        t += 30.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                   "ts": start, "dur": t - start, "args": {}})
        t += 1.0
    doc = {"schemaVersion": 1, "traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), 6))
    return path


def _wall(path: Path, extra: list[str]) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "lumos_core", "replay", str(path), "-q", *extra],
        capture_output=True, text=True, env=env, timeout=900,
    )
    return time.perf_counter() - t, out.returncode


def _targets() -> list[tuple[str, Path]]:
    out = []
    if SHARED.exists():
        for d in sorted(SHARED.iterdir()):
            if not d.is_dir() or d.name == "LICENSES":
                continue
            if d.name in _SEPARATE:  # separate single-rank traces, not one job: one run each
                out += [(f"{d.name}/{f.name}", f) for f in sorted(d.iterdir()) if f.is_file()]
            else:
                out.append((d.name, d))
    else:
        print(f"note: {SHARED} is absent: the synthetic trace only")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", default=None, help="only traces whose name contains this")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        synth = synthetic_trace(Path(tmp) / "synthetic_single_rank.json.gz")
        mb = synth.stat().st_size / 1e6
        raw = len(gzip.decompress(synth.read_bytes())) / 1e6
        targets = [*_targets(), (f"synthetic single rank ({raw:.1f} MB JSON, {mb:.1f} MB gz)", synth)]
        if args.only:
            targets = [(n, p) for n, p in targets if args.only in n]
        print(f"{'trace':<58} {'--no-holdout s':>14} {'hold-out s':>11} {'ratio':>7}")
        worst = 0.0
        for name, path in targets:
            _wall(path, ["--no-holdout"])  # warm the cache and the compiled kernels
            base = [_wall(path, ["--no-holdout"]) for _ in range(args.repeat)]
            held = [_wall(path, []) for _ in range(args.repeat)]
            if base[0][1] != 0 or held[0][1] != 0:
                print(f"{name:<58} exit {base[0][1]} / {held[0][1]} (the trace is refused: not timed)")
                continue
            b, h = min(x for x, _ in base), min(x for x, _ in held)
            worst = max(worst, h / b)
            print(f"{name:<58} {b:14.2f} {h:11.2f} {h / b:6.2f}x")
        verdict = "meets" if worst <= TARGET else "MISSES"
        print(f"worst ratio {worst:.2f}x: {verdict} the target (hold-out <= {TARGET:.0f}x --no-holdout)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
