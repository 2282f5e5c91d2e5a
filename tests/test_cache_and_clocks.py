"""The parse cache (fast re-open, invalidation, corruption) and clock alignment on collectives."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_shared, shared

from lumos_core.trace import cache
from lumos_core.trace.loader import load_job

pytestmark = needs_shared


@pytest.fixture()
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(root))
    return root


def _states(folder: Path) -> tuple[dict[str, str], object]:
    states: dict[str, str] = {}
    job = load_job(folder, on_file=lambda f, s, d: states.__setitem__(Path(f).name, s))
    return states, job


def test_second_open_comes_from_the_cache_and_is_identical(tmp_path: Path, own_cache: Path) -> None:
    folder = tmp_path / "dlrm"
    shutil.copytree(shared("dlrm-v100-8rank"), folder)
    states1, job1 = _states(folder)
    assert set(states1.values()) == {"loaded"}
    assert len([p for p in (own_cache / "ranks").iterdir() if p.suffix == ".rank"]) == 8
    states2, job2 = _states(folder)
    assert set(states2.values()) == {"cached"}
    for a, b in zip(job1.ranks, job2.ranks):
        assert a.rank == b.rank and a.strings == b.strings
        for col in (
            "kind",
            "name",
            "lane",
            "start",
            "dur",
            "correlation",
            "launch",
            "depth",
            "args_start",
            "args_data",
        ):
            assert np.array_equal(getattr(a, col), getattr(b, col)), col
        assert [ln.role for ln in a.lanes] == [ln.role for ln in b.lanes]
        assert [it.name for it in a.iterations] == [it.name for it in b.iterations]
        assert np.array_equal(a.collectives.kind, b.collectives.kind)
        assert a.args_of(5) == b.args_of(5)
        for col in ("event", "kind", "wait_stream", "wait_stream_known", "record_corr"):
            assert np.array_equal(getattr(a.cuda_syncs, col), getattr(b.cuda_syncs, col)), col
    # Nothing was written next to the traces.
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        p.name for p in shared("dlrm-v100-8rank").iterdir()
    )


def test_a_changed_file_is_parsed_again(tmp_path: Path, own_cache: Path) -> None:
    folder = tmp_path / "dlrm"
    shutil.copytree(shared("dlrm-v100-8rank"), folder)
    _states(folder)
    victim = sorted(folder.glob("worker2*"))[0]
    doc = json.loads(gzip.decompress(victim.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "gpu_memcpy"]
    victim.write_bytes(gzip.compress(json.dumps(doc).encode()))
    states, job = _states(folder)
    assert states[victim.name] == "loaded"
    assert sum(1 for s in states.values() if s == "cached") == 7
    assert job.rank(2).count(5) == 0  # Kind.MEMCPY removed


def test_a_corrupt_cache_entry_is_rebuilt(tmp_path: Path, own_cache: Path) -> None:
    folder = tmp_path / "dlrm"
    shutil.copytree(shared("dlrm-v100-8rank"), folder)
    _, job1 = _states(folder)
    victim = sorted(folder.glob("worker5*"))[0]
    entry = cache.entry_path(victim)
    entry.write_bytes(entry.read_bytes()[:-1000])  # cut short (disk full, crash)
    states, job2 = _states(folder)
    assert states[victim.name] == "loaded"
    assert np.array_equal(job1.rank(5).start, job2.rank(5).start)
    assert cache.load(victim) is not None  # rewritten, readable again


def _shift_file(path: Path, delta_us: float) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += delta_us
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_clock_offsets_are_recovered_from_collectives(tmp_path: Path) -> None:
    folder = tmp_path / "dlrm"
    shutil.copytree(shared("dlrm-v100-8rank"), folder)
    reference = load_job(folder, use_cache=False)
    assert reference.alignment["applied"] is False
    _shift_file(sorted(folder.glob("worker3*"))[0], 7000.0)  # rank 3's clock runs 7 ms ahead
    _shift_file(sorted(folder.glob("worker6*"))[0], -2500.0)
    job = load_job(folder, use_cache=False)
    al = job.alignment
    assert al["applied"] is True
    assert al["offsets_us"][3] == pytest.approx(-7000.0, abs=5.0)
    assert al["offsets_us"][6] == pytest.approx(2500.0, abs=5.0)
    assert abs(al["offsets_us"][1]) < 5.0
    assert job.rank(3).clock_offset_ns == pytest.approx(-7_000_000, abs=5_000)
    # After alignment every rank's events sit where they were before the clocks were skewed.
    for a, b in zip(reference.ranks, job.ranks):
        d = (b.start - b.start.min()) - (a.start - a.start.min())
        assert np.abs(d).max() < 5_000
        delta = (b.start[0] + b.raw_shift_ns) - (a.start[0] + a.raw_shift_ns)
        expected = {3: 7_000_000, 6: -2_500_000}.get(a.rank, 0)
        assert abs(delta - expected) < 2_000  # raw times are still available
