"""A damaged cache never breaks a load: every way an entry can be cut short, overwritten or left
half-written is detected, the rank is parsed again, and the entry is rewritten readable.
An unusable cache directory only costs the cache."""

from __future__ import annotations

import mmap
import os
import platform
import re
import resource
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest
from cache_entry import edit_header, write_raw_header
from tracegen import TraceBuilder, nccl_args

from lumos_core.os_memory import mapping_of, page_out, page_out_except
from lumos_core.trace import cache
from lumos_core.trace.loader import load_job
from lumos_core.trace.model import RankTrace


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


def test_columns_are_read_only_views_of_the_entry(trace: Path, own_cache: Path) -> None:
    """Nothing can change a cached column in place (a silent edit of the mapping could be lost when
    its pages are handed back): an attempt fails loudly, and shift makes new arrays."""
    _load(trace)
    entry = cache.entry_path(trace)
    before = entry.read_bytes()
    rank = cache.load(trace)
    assert rank is not None
    assert _file_backed(rank.start) and _file_backed(rank.args_data) and _file_backed(rank.collectives.event)
    with pytest.raises(ValueError, match="read-only"):
        rank.start[:] += 12_345
    with pytest.raises(ValueError, match="read-only"):
        rank.args_data[0] = 0
    measured = np.array(rank.start)
    rank.shift(12_345)
    assert not _file_backed(rank.start) and np.array_equal(rank.start, measured + 12_345)
    rank.args_of_many(np.arange(len(rank)))  # gives the args' pages back
    assert entry.read_bytes() == before, "nothing may reach the cache file"
    again = cache.load(trace)
    assert again is not None and np.array_equal(again.start + 12_345, rank.start)


def _resident_bytes_of(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(head[1]) * 1024
    return total


def test_released_pages_come_back_unchanged(trace: Path, own_cache: Path) -> None:
    _load(trace)
    rank = cache.load(trace)
    assert rank is not None
    want = {k: np.array(getattr(rank, k)) for k in ("kind", "name", "start", "dur", "lane", "args_data")}
    rank.release_pages()
    for k, v in want.items():
        assert np.array_equal(getattr(rank, k), v), k
    rank.shift(5)  # new arrays: the mapping stays as the file has it
    assert not _file_backed(rank.start) and _file_backed(rank.dur)
    assert np.array_equal(rank.start, want["start"] + 5)


def test_a_writable_mapping_keeps_its_edits_when_handed_back(tmp_path: Path) -> None:
    """page_out on a copy-on-write mapping (not the cache's: someone else's) must never lose an edit:
    there it reclaims pages instead of dropping them."""
    f = tmp_path / "column.bin"
    np.arange(200_000, dtype=np.int64).tofile(f)
    column = np.memmap(f, np.int64, mode="c")
    column[0] = -1  # a private copy of the first page
    column[150_000] = -2
    page_out(mapping_of(column))
    page_out_except(column, [column[:10]])
    assert column[0] == -1 and column[150_000] == -2 and column[1] == 1 and column[-1] == 199_999
    assert np.fromfile(f, np.int64)[0] == 0, "the file itself never changes"


def _kernel_pages_out() -> bool:
    """Linux 5.4 or later (MADV_PAGEOUT); resident pages are read from its /proc."""
    if not Path("/proc/self/smaps").exists():
        return False
    parts = [int(p) for p in re.findall(r"\d+", platform.release())[:2]]
    return len(parts) == 2 and tuple(parts) >= (5, 4)


@pytest.fixture
def big_cached(tmp_path: Path, own_cache: Path) -> tuple[RankTrace, Path]:
    """A rank of a few MB of columns (many pages to hand back), loaded from the cache, and its entry."""
    b = TraceBuilder(rank=0, world=1)
    b.step(1, 1000, 400_000)
    for k in range(20_000):
        b.launch(f"gemm_{k % 5}", 1010 + 20 * k, 3, 1020 + 20 * k, 6, stream=7)
    folder = tmp_path / "big"
    folder.mkdir()
    f = b.write(folder / "rank0.json")
    _load(f)
    rank = cache.load(f)
    assert rank is not None
    return rank, cache.entry_path(f)


@pytest.mark.skipif(not _kernel_pages_out(), reason="paging out on request needs Linux 5.4+")
def test_released_pages_leave_the_resident_set(big_cached: tuple[RankTrace, Path]) -> None:
    rank, entry = big_cached
    total = sum(int(np.asarray(getattr(rank, k)).sum()) for k in ("kind", "name", "start", "dur", "lane"))
    resident = _resident_bytes_of(entry)
    assert resident > 1 << 20, "reading the columns should have paged them in"
    rank.release_pages()
    assert _resident_bytes_of(entry) < resident / 4
    assert total == sum(
        int(np.asarray(getattr(rank, k)).sum()) for k in ("kind", "name", "start", "dur", "lane")
    )


@pytest.mark.skipif(not _kernel_pages_out(), reason="paging out on request needs Linux 5.4+")
def test_kept_columns_stay_resident_while_the_rest_is_handed_back(big_cached: tuple[RankTrace, Path]) -> None:
    rank, entry = big_cached
    for k in ("kind", "name", "start", "dur", "lane", "correlation", "external_id", "parent"):
        np.asarray(getattr(rank, k)).sum()  # page them in
    before = _resident_bytes_of(entry)
    rank.release_pages(keep=("dur", "correlation"))
    after = _resident_bytes_of(entry)
    kept = rank.dur.nbytes + rank.correlation.nbytes
    # the kept columns (and at most a page at each end of them) stay; the other six go
    assert kept <= after <= kept + 4 * mmap.PAGESIZE + (before - kept) // 4


@pytest.mark.skipif(not _kernel_pages_out(), reason="paging out on request needs Linux 5.4+")
def test_handed_back_pages_stay_in_the_page_cache(big_cached: tuple[RankTrace, Path]) -> None:
    """The cache's pages are only unmapped, not evicted: reading them again costs no disk read (the
    next step, and the next run, find them in memory)."""
    rank, entry = big_cached
    with entry.open("rb") as f:
        os.fsync(f.fileno())  # written long ago, as a cache entry usually is: clean pages
    names = ("kind", "name", "start", "dur", "lane", "correlation", "external_id", "parent")
    total = sum(int(np.asarray(getattr(rank, k)).sum()) for k in names)
    rank.release_pages()
    assert _resident_bytes_of(entry) < 64 * 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    assert total == sum(int(np.asarray(getattr(rank, k)).sum()) for k in names)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_majflt == before


def test_a_big_job_hands_its_pages_back_and_replays_the_same(
    tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs above PAGE_OUT_ABOVE hand their mapped pages back while the graph is built and replayed:
    the same replay either way (a small job stands in for a big one)."""
    from lumos_core.replay.run import replay
    from lumos_core.trace import model

    folder = tmp_path / "job"
    folder.mkdir()
    for r in range(2):
        b = TraceBuilder(rank=r, world=2)
        b.step(1, 1000, 4000)
        for k in range(200):
            b.launch(f"gemm_{k % 3}", 1010 + 15 * k, 3, 1020 + 15 * k, 6, stream=7)
        b.launch(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4200, 3, 4210, 20, stream=13, kargs=nccl_args(size=2)
        )
        b.write(folder / f"rank{r}.json")
    load_job(folder)  # fills the cache
    want = replay(load_job(folder)).as_dict()
    calls: list[int] = []
    real = model.page_out_except
    monkeypatch.setattr(model, "PAGE_OUT_ABOVE", 0)
    monkeypatch.setattr(model, "page_out_except", lambda c, keep: (calls.append(len(keep)), real(c, keep)))
    job = load_job(folder)
    assert job.pages_worth_releasing()
    got = replay(job).as_dict()
    for d in (want, got):
        d.pop("seconds", None)
        d.pop("simulate_seconds", None)
        d.pop("tasks_per_second", None)
    assert got == want
    assert len(calls) >= 3 * 2  # each rank: the replaced time columns, after the graph, after its timeline
