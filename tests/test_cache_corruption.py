"""A damaged cache never breaks a load: every way an entry can be cut short, overwritten or left
half-written is detected, the rank is parsed again, and the entry is rewritten readable.
An unusable cache directory only costs the cache."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tracegen import TraceBuilder, nccl_args

from lumos_core.trace import cache
from lumos_core.trace.loader import load_job


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(root))
    return root


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    b = TraceBuilder(rank=0, world=1)
    b.step(1, 1000, 400)
    for k in range(40):
        b.launch(f"gemm_{k % 3}", 1010 + 8 * k, 3, 1020 + 8 * k, 6, stream=7)
    b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1400, 3, 1410, 20, stream=13, kargs=nccl_args(size=1))
    folder = tmp_path / "job"
    folder.mkdir()
    return b.write(folder / "rank0.json")


def _load(path: Path) -> tuple[str, object]:
    states: list[str] = []
    job = load_job(path, on_file=lambda f, s, d: states.append(s))
    return states[0], job


def _truncate(n: int) -> Callable[[Path], None]:
    def damage(f: Path) -> None:
        f.write_bytes(f.read_bytes()[:n])

    return damage


def _garbage(f: Path) -> None:
    f.write_bytes(os.urandom(max(f.stat().st_size, 64)))


def _meta_edit(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(f: Path) -> None:
        meta = json.loads(f.read_text())
        edit(meta)
        f.write_text(json.dumps(meta))

    return damage


def _other_array(f: Path) -> None:  # a valid .npy of the wrong length (another rank's column)
    np.save(f, np.arange(3, dtype=np.int64))


def _into_folder(f: Path) -> None:
    f.unlink()
    f.mkdir()


DAMAGE = {
    "meta truncated": ("meta.json", _truncate(40)),
    "meta empty": ("meta.json", _truncate(0)),
    "meta garbage": ("meta.json", _garbage),
    "meta not an object": ("meta.json", lambda f: f.write_text("[1, 2, 3]")),
    "meta missing a key": ("meta.json", _meta_edit(lambda m: m.pop("lanes"))),
    "meta lists a missing column": ("meta.json", _meta_edit(lambda m: m["columns"].append("nope"))),
    "meta wrong types": ("meta.json", _meta_edit(lambda m: m.update(raw_shift_ns="x", lanes=[[1]]))),
    "meta is a folder": ("meta.json", _into_folder),
    "column truncated": ("start.npy", _truncate(100)),
    "column header only": ("dur.npy", _truncate(128)),
    "column garbage": ("name.npy", _garbage),
    "column removed": ("lane.npy", lambda f: f.unlink()),
    "column of another length": ("kind.npy", _other_array),
    "lane index of another length": ("lane_begin.npy", _other_array),
    "collective column of another length": ("coll_event.npy", _other_array),
    "column pickled object": (
        "launch.npy",
        lambda f: np.save(f, np.array([{}], dtype=object), allow_pickle=True),
    ),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_entry_is_detected_and_rebuilt(trace: Path, own_cache: Path, case: str) -> None:
    state, first = _load(trace)
    assert state == "loaded"
    entry = cache.entry_path(trace)
    assert (entry / "meta.json").is_file()
    name, damage = DAMAGE[case]
    damage(entry / name)
    state, again = _load(trace)
    assert state == "loaded", f"{case}: a damaged entry must be parsed again, not used"
    a, b = first.ranks[0], again.ranks[0]
    for col in ("kind", "name", "lane", "start", "dur", "launch", "lane_begin"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert np.array_equal(a.collectives.event, b.collectives.event)
    state, _ = _load(trace)
    assert state == "cached", "the entry is rewritten and readable again"


def test_half_written_entries_and_stray_files_are_ignored(trace: Path, own_cache: Path) -> None:
    ranks = own_cache / "ranks"
    ranks.mkdir(parents=True)
    (ranks / "leftover.tmp").mkdir()  # a crash between mkdtemp and the rename
    (ranks / "stray-file").write_text("x")
    entry = cache.entry_path(trace)
    entry.mkdir()
    (entry / "start.npy").write_bytes(b"\x93NUMPY")  # columns without meta.json: incomplete
    assert _load(trace)[0] == "loaded"
    assert _load(trace)[0] == "cached"
    assert cache.clear() >= 2


def test_an_unusable_cache_directory_costs_only_the_cache(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    for _ in range(2):
        state, job = _load(trace)
        assert state == "loaded" and len(job.ranks) == 1
