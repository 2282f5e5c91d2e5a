"""Loading a multi-GB trace folder: peak memory per GB of JSON and load time per GB.

    .venv/bin/python bench/bench_big_folder.py [--gb 2] [--ranks 8] [--single-gb 1] [--keep]

Generates the folder in the system temp directory (never in the repository): every rank of
h100-nanogpt-8rank tiled over and over - each copy shifted by one recording's length, with fresh
correlation/External ids, flow ids and ProfilerStep numbers - into one plain-JSON file per rank,
until the folder holds ``--gb`` GiB. Then, each in a fresh process whose whole process tree
(main + parsing workers) is sampled for resident memory every 20 ms:

* the floor: each file of the folder read and parsed whole with ``orjson.loads``, one after another
  in one process (the text a bare parser must get through; its dict tree takes ~10x the file);
* a cold load of the folder with the default parallelism, and with one parsing process, in s/GiB
  beside the floor (target: <= 12 s/GiB on 2 cores, never slower than the floor);
* a cold load of one ``--single-gb`` GiB rank file (the streaming parser's bound on one file);
* the refusal of a file bigger than the machine can parse (a clear message, not the OOM killer).

The generated data is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
import psutil
from common import REPO, shared_or_exit

SOURCE = shared_or_exit("h100-nanogpt-8rank")
ID_STRIDE = 10_000_000  # added to correlation / External id / flow ids per copy
STEPS_PER_COPY = 4  # ProfilerStep#10..13 in the source

LOAD = """
import json, resource, sys, time
from lumos_core.trace.loader import load_job
t = time.perf_counter()
c = time.process_time()
job = load_job(sys.argv[1], use_cache=False, workers=int(sys.argv[2]) or None)
dt = time.perf_counter() - t
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = time.process_time() - c + ch.ru_utime + ch.ru_stime  # the parsing workers too
cols = sum(sum(getattr(r, c).nbytes for c in ('kind', 'cat', 'name', 'lane', 'start', 'dur', 'correlation',
           'external_id', 'depth', 'parent', 'launch', 'args_start', 'args_len', 'args_data')) for r in job.ranks)
print(json.dumps({'seconds': dt, 'cpu': cpu, 'ranks': len(job.ranks), 'events': job.n_events, 'columns': cols,
                  'skipped': [s.reason for s in job.skipped], 'iterations': len(job.ranks[0].iterations)}))
"""

REFUSE = """
import sys
from lumos_core.trace import loader
from lumos_core.errors import LumosError
loader._available_memory = lambda: int(float(sys.argv[2]) * 2**30)  # a smaller machine
try:
    loader.load_job(sys.argv[1], use_cache=False)
except LumosError as exc:
    print(exc)
"""

FLOOR = """
import gc, glob, json, sys, time, orjson
wall = cpu = 0.0
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    t, c = time.perf_counter(), time.process_time()
    with open(f, 'rb') as fh:
        doc = orjson.loads(fh.read())
    wall += time.perf_counter() - t
    cpu += time.process_time() - c
    del doc
    gc.collect()  # outside the timed part: each file starts from a clean heap
print(json.dumps({'seconds': wall, 'cpu': cpu}))
"""

BASELINE = "import json, time, numpy, orjson, lumos_core.trace.loader; time.sleep(0.5); print(json.dumps({}))"


# ------------------------------------------------------------------------------------- generation


def _rank_files() -> list[Path]:
    files = sorted(SOURCE.glob("*.json.gz"))
    if not files:
        sys.exit(f"no traces in {SOURCE}")
    return files


class _Tiler:
    """One source rank, re-emitted as copy k: times +k·period, ids +k·stride, steps +k·4."""

    def __init__(self, path: Path, period_us: float) -> None:
        doc = orjson.loads(gzip.decompress(path.read_bytes()))
        self.meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        self.events = doc["traceEvents"]
        self.period = period_us
        self.header = orjson.dumps(self.meta)[:-1] + b', "traceEvents": ['

    def copy(self, k: int) -> bytes:
        out = []
        for e in self.events:
            if e.get("ph") == "M":
                if k == 0:
                    out.append(e)
                continue
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + k * self.period
            if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
                e["id"] = e["id"] + k * ID_STRIDE
            name = e.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(name[13:]) + k * STEPS_PER_COPY}"
            args = e.get("args")
            if isinstance(args, dict) and ("correlation" in args or "External id" in args):
                args = dict(args)
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] += k * ID_STRIDE
                e["args"] = args
            out.append(e)
        return orjson.dumps(out)[1:-1]


def generate(folder: Path, total_gib: float, ranks: int) -> int:
    """Write ``ranks`` files totalling about ``total_gib`` GiB; returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = _rank_files()
    first = _Tiler(sources[0], 0.0)
    ts = [e["ts"] for e in first.events if e.get("ph") == "X"]
    period = (max(ts) - min(ts)) * 1.05  # one recording plus a gap
    per_rank = total_gib * 2**30 / ranks
    written = 0
    for r in range(ranks):
        tiler = _Tiler(sources[r % len(sources)], period)
        meta_info = dict(tiler.meta.get("distributedInfo") or {})
        meta_info.update({"rank": r, "world_size": ranks})
        tiler.meta["distributedInfo"] = meta_info
        tiler.header = orjson.dumps(tiler.meta)[:-1] + b', "traceEvents": ['
        path = folder / f"big_rank{r}.json"
        size = 0
        with path.open("wb") as fh:
            fh.write(tiler.header)
            k = 0
            while size < per_rank:
                chunk = tiler.copy(k)
                if k:
                    fh.write(b",\n")
                fh.write(chunk)
                size += len(chunk)
                k += 1
            fh.write(b"]}")
        written += path.stat().st_size
        print(f"  wrote {path.name}: {path.stat().st_size / 2**20:,.0f} MiB ({k} copies)", flush=True)
    return written


# ------------------------------------------------------------------------------------ measurement


def run_sampled(code: str, *args: str) -> tuple[dict, float]:
    """Run ``code`` in a fresh interpreter; (its JSON result, peak RSS of its process tree in bytes)."""
    proc = psutil.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:  # cheap: the process list is refreshed every 0.5 s, RSS read every 50 ms
        nonlocal peak
        tree: list[psutil.Process] = [proc]
        k = 0
        while not done.is_set():
            if k % 10 == 0:
                try:
                    tree = [proc, *proc.children(recursive=True)]
                except psutil.Error:
                    pass
            rss = 0
            for p in tree:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
            k += 1
            time.sleep(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, _ = proc.communicate()
    done.set()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"measurement failed (exit {proc.returncode}): {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1]), peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=2.0, help="GiB of JSON in the folder (default 2)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--single-gb", type=float, default=1.0, help="GiB of the single-file test (0: skip)")
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lumos-big-"))
    try:
        folder = root / "folder"
        print(f"generating {args.gb} GiB in {args.ranks} ranks under {root} ...", flush=True)
        t0 = time.perf_counter()
        total = generate(folder, args.gb, args.ranks)
        gib = total / 2**30
        print(f"  {gib:.2f} GiB in {time.perf_counter() - t0:.0f} s")
        _, base = run_sampled(BASELINE)
        print(f"interpreter + numpy + lumos_core imported: {base / 2**20:.0f} MiB resident")
        avail = psutil.virtual_memory().available
        print(f"machine: {os.cpu_count()} CPUs, {avail / 2**30:.1f} GiB available")
        floor, floor_peak = run_sampled(FLOOR, str(folder))
        print(
            f"floor (orjson.loads of each whole file, one process): {floor['seconds']:.1f} s = "
            f"{floor['seconds'] / gib:.1f} s/GiB, {floor['cpu']:.1f} CPU s; peak {floor_peak / 2**30:.2f} GiB"
        )
        for workers, label in ((0, "default parallelism"), (1, "one parsing process")):
            res, peak = run_sampled(LOAD, str(folder), str(workers))
            assert not res["skipped"], res["skipped"]
            print(
                f"cold load, {label}: {res['seconds']:.1f} s = {res['seconds'] / gib:.1f} s/GiB (target <= 12) "
                f"= {res['seconds'] / floor['seconds']:.2f}x the floor (target <= 1.0); {res['cpu']:.1f} CPU s = "
                f"{res['cpu'] / floor['cpu']:.2f}x the floor's CPU; "
                f"peak {peak / 2**30:.2f} GiB = {(peak - base) / total:.2f} GiB per GiB of JSON over the "
                f"baseline; {res['ranks']} ranks, {res['events']:,} events, {res['iterations']} iterations "
                f"per rank, columns {res['columns'] / 2**30:.2f} GiB = {res['columns'] / total:.2f}x the JSON"
            )
        if args.single_gb > 0:
            single = root / "single"
            size = generate(single, args.single_gb, 1)
            res, peak = run_sampled(LOAD, str(single), "1")
            print(
                f"one {size / 2**30:.2f} GiB rank file: {res['seconds']:.1f} s = "
                f"{res['seconds'] / (size / 2**30):.1f} s/GiB; peak {peak / 2**30:.2f} GiB = "
                f"{(peak - base) / size:.2f} GiB per GiB of JSON over the baseline"
            )
            from lumos_core.trace.loader import _estimated_tree_bytes

            small_machine = _estimated_tree_bytes(single / "big_rank0.json") / 2 / 2**30  # half of the need
            res_text = subprocess.run(
                [sys.executable, "-c", REFUSE, str(single), str(small_machine)],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            print(f"on a machine with {small_machine:.1f} GiB available: {res_text}")
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
            print(f"deleted {root}")


if __name__ == "__main__":
    main()
