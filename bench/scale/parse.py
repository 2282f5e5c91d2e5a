"""The cold parse of a job's files (``load_job`` into an empty cache folder, local engine and Ray) beside
the floor measured in the same run: ``gzip.decompress`` + ``orjson.loads`` of the files in one process."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from scale.jobs import ROOT, run_py

FLOOR = """
import gc, gzip, json, sys, time, orjson
files = sys.argv[1:]
wall = cpu = 0.0
raw = 0
for f in files:
    t, c = time.perf_counter(), time.process_time()
    data = open(f, 'rb').read()
    if data[:2] == b'\\x1f\\x8b':
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    wall += time.perf_counter() - t
    cpu += time.process_time() - c
    raw += len(data)
    del doc, data
    gc.collect()  # outside the timed part: each file starts from a clean heap
print(json.dumps({'wall': wall, 'cpu': cpu, 'json_bytes': raw}))
"""


PARSE = """
import json, os, resource, sys, time
engine, workers, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
from lumos_core.trace.loader import load_job
parser = None
ray_start = 0.0
if engine == 'ray':
    from lumos_core.sweep.ray_load import RayParser
    parser = RayParser(jobs=workers or None)
    t = time.perf_counter()
    parser.engine.connect()  # Ray's own start-up, reported apart from the parse
    ray_start = time.perf_counter() - t
def tree_cpu():  # Ray's processes (workers, raylet, GCS) are not waited for: read them while alive
    import psutil
    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total
tree0 = tree_cpu() if parser is not None else 0.0
load0 = os.getloadavg()[0]
last = [0.0]
def on_file(f, state, detail):
    if state in ('loaded', 'failed'):
        last[0] = time.perf_counter()
t0 = time.perf_counter()
c0 = time.process_time()
job = load_job(folder, use_cache=True, workers=workers or None, parser=parser, on_file=on_file)
cpu = time.process_time() - c0
if parser is not None:
    cpu += tree_cpu() - tree0
    parser.close()
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({'parse_wall': last[0] - t0, 'cpu': cpu + ch.ru_utime + ch.ru_stime, 'ranks': len(job.ranks),
                  'skipped': len(job.skipped), 'ray_start': ray_start,
                  'load': [round(load0, 1), round(os.getloadavg()[0], 1)]}))
"""


def parse_table(code: Path, label: str, name: str, job: Path, args: argparse.Namespace) -> None:
    """Cold parse of ``job`` (local engine, then Ray with each worker count) beside the floor."""
    files = sorted(str(f) for f in job.iterdir() if f.name.endswith((".json", ".json.gz")))
    step = max(1, -(-len(files) // args.floor_files))
    sample = files[::step]
    max_bytes = int(args.max_gb * 2**30)
    floor = run_py(code, FLOOR, sample, ROOT / "cache" / "floor", max_bytes, args.timeout)
    if floor.error or not floor.out:
        print(f"{name:>5} {label:<8} floor failed: {floor.error}")
        return
    scale = 1.0
    json_bytes = floor.out["json_bytes"]
    if len(sample) < len(files):  # scale the sample by the text of all files
        from lumos_core.trace.kineto_reader import text_bytes

        json_bytes = sum(text_bytes(Path(f)) for f in files)
        scale = json_bytes / sum(text_bytes(Path(f)) for f in sample)
    gib = json_bytes / 2**30
    f_wall, f_cpu = floor.out["wall"] * scale, floor.out["cpu"] * scale
    how = (
        f"all {len(files)} files" if scale == 1.0 else f"{len(sample)} of {len(files)} files, scaled by bytes"
    )
    print(
        f"{name:>5} {label:<8} {len(files)} files, {gib:.2f} GiB of JSON; floor (gzip + orjson.loads, "
        f"one process, {how}): {f_wall:.1f} s wall = {f_wall / gib:.1f} s/GiB, {f_cpu:.1f} CPU s = "
        f"{f_cpu / gib:.1f} CPU s/GiB, {f_cpu / max(f_wall, 1e-9):.2f} cores; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    runs = [("local", 0)] + [("ray", int(w)) for w in args.ray_workers.split(",") if w.strip()]
    for engine, workers in runs:
        cache = ROOT / "cache" / f"parse-{label}-{name}-{engine}{workers}"
        shutil.rmtree(cache, ignore_errors=True)
        r = run_py(code, PARSE, [engine, str(workers), str(job)], cache, max_bytes, args.timeout)
        shutil.rmtree(cache, ignore_errors=True)
        what = "local, default workers" if engine == "local" else f"--engine ray, {workers} local worker(s)"
        if r.error or not r.out:
            print(f"{name:>5} {label:<8}   {what}: {r.error}", flush=True)
            continue
        o = r.out
        wall = o["parse_wall"]
        # Cores = CPU s / wall s: the share of the machine the run got. On a shared machine the
        # kernel splits the cores between login sessions (autogroups) first, so the same work
        # gets a different share from run to run.
        cpu = (
            f", {o['cpu']:.1f} CPU s = {o['cpu'] / gib:.1f} CPU s/GiB = {o['cpu'] / f_cpu:.2f}x the floor's CPU, "
            f"{o['cpu'] / max(wall, 1e-9):.2f} cores"
        )
        if engine == "ray":
            cpu += f" (CPU: all Ray processes during the parse; + {o['ray_start']:.1f} s Ray start-up)"
        load = o.get("load")
        print(
            f"{name:>5} {label:<8}   {what}: cold parse {wall:.1f} s = {wall / gib:.1f} s/GiB "
            f"(target <= 12) = {wall / f_wall:.2f}x the floor's wall{cpu}; {o['ranks']} ranks"
            + (f", {o['skipped']} skipped" if o["skipped"] else "")
            + (f"; load {load[0]:g} -> {load[1]:g}" if load else ""),
            flush=True,
        )
