"""Measured memory: the profiler's [memory] records as columns, cached, and what they say.

The traces in tests/data/cpu-gpt-memory/ were recorded by this project (record.sh there) with
``profile_memory=True``; every figure is checked against the raw events read with plain json.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from cache_entry import edit_header
from conftest import REPO, needs_shared, shared

from lumos_core.trace import cache
from lumos_core.trace.loader import load_job
from lumos_core.trace.memory_summary import NO_MEMORY_HINT, memory_report, rank_memory

DATA = REPO / "tests" / "data" / "cpu-gpt-memory"
RUNS = ("base", "layers8", "microbatch8", "seq256")


def _raw(run: str) -> tuple[list[dict], list[dict]]:
    doc = json.loads(gzip.decompress((DATA / run / "rank0.pt.trace.json.gz").read_bytes()))
    events = doc["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return mem, steps


@pytest.fixture()
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(root))
    return root


@pytest.mark.parametrize("run", RUNS)
def test_measured_peak_matches_the_raw_events(run: str) -> None:
    mem, steps = _raw(run)
    assert mem, "the recorded trace must hold memory records"
    job = load_job(DATA / run, use_cache=False)
    rank = job.ranks[0]
    assert len(rank.memory) == len(mem)
    (dev,) = rank_memory(rank)
    assert dev.label == "CPU"
    assert dev.peak_allocated == max(e["args"]["Total Allocated"] for e in mem)
    # Peak per iteration, from the raw step ranges.
    for it, step in zip(dev.iterations, sorted(steps, key=lambda e: e["ts"])):
        inside = [
            e["args"]["Total Allocated"] for e in mem if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]
        ]
        assert it.name == step["name"]
        assert it.allocated == max(inside)
    assert len(dev.iterations) == len(steps) == 3
    # The allocating operator at the peak: the innermost non-allocation op around the raw record.
    peak = max(mem, key=lambda e: e["args"]["Total Allocated"])
    ops = [
        e
        for e in json.loads(gzip.decompress((DATA / run / "rank0.pt.trace.json.gz").read_bytes()))[
            "traceEvents"
        ]
        if e.get("cat") == "cpu_op"
        and e["ts"] <= peak["ts"] <= e["ts"] + e["dur"]
        and e["tid"] == peak["tid"]
    ]
    named = [e for e in ops if not e["name"].startswith(("aten::empty", "aten::resize_"))]
    innermost = max(named, key=lambda e: (e["ts"], -e["dur"]))
    assert dev.peak_operator == innermost["name"]
    # Allocation totals per operator add up to every positive change in the records.
    assert dev.top_operators and dev.top_operators[0].bytes > 0


def test_memory_columns_are_cached_and_old_entries_are_rebuilt(tmp_path: Path, own_cache: Path) -> None:
    folder = tmp_path / "base"
    shutil.copytree(DATA / "base", folder)
    first = load_job(folder).ranks[0]
    states: dict[str, str] = {}
    second = load_job(folder, on_file=lambda f, s, d: states.__setitem__(Path(f).name, s)).ranks[0]
    assert states["rank0.pt.trace.json.gz"] == "cached"  # (config.json beside it is no trace)
    for col in ("ts", "allocated", "reserved", "delta", "device_type", "op", "addr"):
        assert np.array_equal(getattr(first.memory, col), getattr(second.memory, col)), col
    # An entry written by a loader that did not keep memory columns: same key, no mem_* columns.
    trace = next(folder.glob("*.json.gz"))
    entry = cache.entry_path(trace)

    def drop_memory(header: dict) -> None:
        header["columns"] = {k: v for k, v in header["columns"].items() if not k.startswith("mem_")}

    edit_header(entry, drop_memory)
    assert cache.load(trace) is None  # detected as outdated, removed
    states.clear()
    third = load_job(folder, on_file=lambda f, s, d: states.__setitem__(Path(f).name, s)).ranks[0]
    assert states[trace.name] == "loaded"
    assert np.array_equal(third.memory.allocated, first.memory.allocated)
    assert "mem_allocated" in cache.read_header(entry)[0]["columns"]


def test_a_trace_without_memory_records_says_how_to_get_them() -> None:
    job = load_job(REPO / "tests" / "data" / "cpu-gpt" / "base", use_cache=False)
    report = memory_report(job)
    assert report == {"recorded": False, "note": NO_MEMORY_HINT, "devices": []}
    assert "profile_memory=True" in NO_MEMORY_HINT


@needs_shared
def test_cuda_records_of_a_real_gpu_trace() -> None:
    path = shared("h100-hf-inference", "gaunernst_bert-small-uncased__1016001.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    cuda = [
        e["args"] for e in doc["traceEvents"] if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1
    ]
    devs = rank_memory(load_job(path, use_cache=False).ranks[0])
    assert [d.label for d in devs] == ["CUDA 0", "CPU"]
    assert devs[0].peak_allocated == max(a["Total Allocated"] for a in cuda)
    assert devs[0].peak_reserved == max(a["Total Reserved"] for a in cuda)
    assert devs[0].peak_bytes == devs[0].peak_reserved  # the caching allocator's hold counts


def test_inspect_prints_the_peaks_or_how_to_record_them() -> None:
    import subprocess
    import sys

    def inspect(path: Path) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "lumos_core", "inspect", str(path), "-q"],
            capture_output=True, text=True, cwd=REPO, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r.stdout

    text = inspect(DATA / "base" / "rank0.pt.trace.json.gz")
    peak = max(e["args"]["Total Allocated"] for e in _raw("base")[0])
    assert f"peak allocated {peak / 2**20:,.1f} MiB" in text and "ProfilerStep#3" in text
    assert "top allocating operators" in text
    assert "profile_memory=True" in inspect(
        REPO / "tests" / "data" / "cpu-gpt" / "base" / "rank0.pt.trace.json.gz"
    )
