"""Loading benchmark on h100-nanogpt-8rank: our cold load and cached re-open against the floor
(plain gzip + orjson.loads of the same files), and peak memory against the raw JSON size.

Each measurement runs in a fresh Python process so that memory figures and caches are clean.
Targets: cold <= 12 s per GiB of JSON on 2 cores and never slower than the floor (<= 1.0x); cached
<= 0.1x the floor; peak memory <= 3x the JSON. CPU seconds (the process and its parsing workers) are
printed beside the wall times: on a shared, loaded machine they are the figures to compare.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from common import REPO, shared_or_exit

FOLDER = shared_or_exit("h100-nanogpt-8rank")

FLOOR = """
import glob, gzip, json, time, orjson, resource, sys
files = sorted(glob.glob(sys.argv[1] + '/*.json*'))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter(); c = time.process_time(); raw = 0
for f in files:
    data = gzip.decompress(open(f, 'rb').read()); raw += len(data)
    doc = orjson.loads(data); del doc, data
dt = time.perf_counter() - t
print(json.dumps({'seconds': dt, 'cpu': time.process_time() - c, 'raw_bytes': raw}))
"""

OURS = """
import json, resource, sys, time
import numpy, orjson  # imported before timing, as in the floor
base_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from lumos_core.trace.loader import load_job
t = time.perf_counter(); c = time.process_time()
job = load_job(sys.argv[1], use_cache=sys.argv[2] == 'cache')
dt = time.perf_counter() - t
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = time.process_time() - c + ch.ru_utime + ch.ru_stime  # the parsing workers too
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({'seconds': dt, 'cpu': cpu, 'ranks': len(job.ranks), 'events': job.n_events,
                  'self_peak_mb': self_kb / 1024, 'self_base_mb': base_self / 1024, 'child_peak_mb': child_kb / 1024,
                  'columns_mb': sum(sum(getattr(t, c).nbytes for c in ('kind','cat','name','lane','start','dur','correlation','external_id','depth','parent','launch','args_start','args_len','args_data')) for t in job.ranks) / 2**20}))
"""


def run(code: str, *args: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(code: str, *args: str, repeat: int = 3, env: dict | None = None) -> dict:
    runs = [run(code, *args, env=env) for _ in range(repeat)]
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    floor = best(FLOOR, str(FOLDER))
    raw_mb = floor["raw_bytes"] / 2**20
    gib = floor["raw_bytes"] / 2**30
    with tempfile.TemporaryDirectory() as cache:
        env = {"LUMOS_CACHE_DIR": cache}
        cold = best(OURS, str(FOLDER), "nocache", env=env)
        run(OURS, str(FOLDER), "cache", env=env)  # fill the cache
        warm = best(OURS, str(FOLDER), "cache", env=env)
    workers = min(os.cpu_count() or 1, 8)
    peak = (cold["self_peak_mb"] - cold["self_base_mb"]) + workers * cold["child_peak_mb"]
    print(
        f"h100-nanogpt-8rank: {cold['ranks']} ranks, {cold['events']:,} events, {raw_mb:.1f} MiB of JSON "
        f"({os.cpu_count()} CPUs)"
    )
    print(
        f"  floor (gzip + orjson.loads, sequential) {floor['seconds']:.3f} s   = {floor['seconds'] / gib:.1f} s/GiB "
        f"({floor['cpu']:.3f} CPU s)"
    )
    print(
        f"  cold load                               {cold['seconds']:.3f} s   = {cold['seconds'] / gib:.1f} s/GiB "
        f"(target <= 12) = {cold['seconds'] / floor['seconds']:.2f}x floor (target <= 1.0x); "
        f"{cold['cpu']:.3f} CPU s = {cold['cpu'] / floor['cpu']:.2f}x the floor's CPU"
    )
    print(
        f"  cached re-open                          {warm['seconds']:.3f} s   = {warm['seconds'] / floor['seconds']:.3f}x floor "
        "(target <= 0.1x)"
    )
    print(
        f"  peak memory: main +{cold['self_peak_mb'] - cold['self_base_mb']:.0f} MiB over its {cold['self_base_mb']:.0f} MiB "
        f"baseline, each of {workers} parsing processes peaks at {cold['child_peak_mb']:.0f} MiB"
    )
    print(
        f"  peak memory (main growth + all workers) {peak:.0f} MiB = {peak / raw_mb:.2f}x the JSON "
        "(target <= 3x)"
    )
    print(f"  loaded columns {cold['columns_mb']:.1f} MiB = {cold['columns_mb'] / raw_mb:.2f}x the JSON")


if __name__ == "__main__":
    main()
