"""A damaged cache never breaks a load: every way an entry can be cut short, overwritten or left
half-written is detected, the rank is parsed again, and the entry is rewritten readable.
An unusable cache directory only costs the cache."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest
from cache_entry import edit_header, write_raw_header
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


def _header_garbage(f: Path) -> None:
    header, _ = cache.read_header(f)
    write_raw_header(f, os.urandom(len(orjson.dumps(header))))


def _column(name: str, field: int, value: object) -> Callable[[Path], None]:
    """Set one field of a column's header entry: 0 dtype, 1 shape, 2 offset."""

    def edit(h: dict) -> None:
        h["columns"][name][field] = value(h["columns"][name][field]) if callable(value) else value

    return lambda f: edit_header(f, edit)


def _into_folder(f: Path) -> None:
    f.unlink()
    f.mkdir()
    (f / "meta.json").write_text("{}")  # as an entry of the folder-per-rank layout looked


DAMAGE = {
    "entry truncated in the header": _truncate(40),
    "entry empty": _truncate(0),
    "entry prefix only": _truncate(16),
    "entry garbage": _garbage,
    "entry of another version": lambda f: f.write_bytes(b"LUMOSRK\x04" + f.read_bytes()[8:]),
    "data cut short": lambda f: f.write_bytes(f.read_bytes()[:-100]),
    "data appended to": lambda f: f.write_bytes(f.read_bytes() + bytes(64)),
    "header garbage": _header_garbage,
    "header not an object": lambda f: write_raw_header(f, b"[1, 2, 3]"),
    "header with a huge length": lambda f: f.write_bytes(f.read_bytes()[:8] + b"\xff" * 8),
    "meta missing a key": lambda f: edit_header(f, lambda h: h["meta"].pop("lanes")),
    "meta wrong types": lambda f: edit_header(f, lambda h: h["meta"].update(raw_shift_ns="x", lanes=[[1]])),
    "size wrong": lambda f: edit_header(f, lambda h: h.update(size=h["size"] + 64)),
    "column removed": lambda f: edit_header(f, lambda h: h["columns"].pop("lane")),
    "column outside the entry": _column("start", 2, lambda off: off + (1 << 40)),
    "column offset unaligned": _column("dur", 2, lambda off: off + 1),
    "column offset negative": _column("name", 2, -64),
    "column shape negative": _column("name", 1, [-1]),
    "column of another length": _column("kind", 1, [3]),
    "column of another rank": _column("kind", 1, lambda shape: [shape[0], 2]),
    "lane index of another length": _column("lane_begin", 1, [3]),
    "collective column of another length": _column("coll_event", 1, [3]),
    "cuda_sync column of another length": _column("sync_kind", 1, [3]),
    "column of Python objects": _column("launch", 0, "|O"),
    "column of an unknown dtype": _column("launch", 0, "nope"),
    "entry is a folder": _into_folder,
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_entry_is_detected_and_rebuilt(trace: Path, own_cache: Path, case: str) -> None:
    state, first = _load(trace)
    assert state == "loaded"
    entry = cache.entry_path(trace)
    assert entry.is_file()
    DAMAGE[case](entry)
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
    (ranks / "0123.rank.tmp").write_bytes(b"LUMOSRK")  # a crash while writing an entry
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


def _file_backed(a: object) -> bool:
    while a is not None:
        if isinstance(a, np.memmap | mmap.mmap):
            return True
        a = getattr(a, "base", None)
    return False


def test_columns_are_views_of_the_entry_mapped_copy_on_write(trace: Path, own_cache: Path) -> None:
    _load(trace)
    entry = cache.entry_path(trace)
    before = entry.read_bytes()
    rank = cache.load(trace)
    assert rank is not None
    assert _file_backed(rank.start) and _file_backed(rank.args_data) and _file_backed(rank.collectives.event)
    rank.shift(12_345)  # in place, as putting ranks on one time base does
    rank.args_of_many(np.arange(len(rank)))  # gives the args' pages back: never the shifted ones
    assert entry.read_bytes() == before, "an edit of a mapped column must never reach the cache"
    again = cache.load(trace)
    assert again is not None and np.array_equal(again.start + 12_345, rank.start)
