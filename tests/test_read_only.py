"""Input traces are read-only: loading (cache on), re-opening from the cache, building the graph and
``lumos inspect``/``lumos replay`` never create, modify or delete anything under ../shared/traces.

Nothing is copied: every file and folder under the shared tree is snapshotted (size, mtime, inode,
mode) before and after, and an audit hook fails the test the moment this process opens a path in
the tree for writing, creates, renames, removes or re-stamps one (tests run as root in CI, where
read-only permission bits protect nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, SHARED_TRACES, needs_shared, shared

from lumos_core.errors import LumosError
from lumos_core.graph.build import build_graph
from lumos_core.trace import cache
from lumos_core.trace.loader import TRACE_SUFFIXES, load_job

pytestmark = needs_shared

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_MUTATING_EVENTS = {
    "os.mkdir",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "os.truncate",
    "os.utime",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "shutil.rmtree",
    "shutil.move",
    "shutil.copyfile",
}
_violations: list[str] = []
_watching = False


def _under_shared(path: object) -> bool:
    if isinstance(path, int):
        return False
    try:
        p = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    root = str(SHARED_TRACES)
    return p == root or p.startswith(root + os.sep)


def _audit(event: str, args: tuple) -> None:
    if not _watching:
        return
    if event == "open" and args and _under_shared(args[0]):
        mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writes:
            _violations.append(f"open({args[0]!r}, mode={mode!r}, flags={flags!r})")
    elif event in _MUTATING_EVENTS and any(_under_shared(a) for a in args[:2]):
        _violations.append(f"{event}{args[:2]!r}")


sys.addaudithook(_audit)  # audit hooks cannot be removed: it only records while _watching is set


@pytest.fixture
def watch() -> Iterator[list[str]]:
    global _watching
    _violations.clear()
    _watching = True
    try:
        yield _violations
    finally:
        _watching = False


def snapshot() -> dict[str, tuple[int, int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(SHARED_TRACES):
        for name in [".", *filenames]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.normpath(p)] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)
        dirnames.sort()
    return out


def trace_inputs() -> list[Path]:
    """Every trace folder, and every edge-case file on its own."""
    folders = sorted(p for p in SHARED_TRACES.iterdir() if p.is_dir() and p.name != "LICENSES")
    files = sorted(p for p in shared("edge-cases").iterdir() if p.name.endswith(TRACE_SUFFIXES))
    return folders + files


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LUMOS_CACHE_DIR", str(root))
    return root


def test_loading_every_shared_input_writes_nothing_there(watch: list[str], own_cache: Path) -> None:
    before = snapshot()
    inputs = trace_inputs()
    assert len(inputs) >= 6 + 9
    loaded = 0
    states: list[str] = []
    record = lambda f, s, d: states.append(s)  # noqa: E731
    for path in inputs:
        # In this process (the audit hook sees every open) and with the cache on: parse + save...
        states.clear()
        try:
            job = load_job(path, workers=1, on_file=record)
        except LumosError:  # folders of unrelated traces (edge-cases, hta-critical-path) are refused
            assert "loaded" in states or "cached" in states
            continue
        # ...then again from the cache entries (memory-mapped read-only: no write-back).
        states.clear()
        again = load_job(path, workers=1, on_file=record)
        assert set(states) <= {"cached", "failed"}, states
        assert [t.rank for t in again.ranks] == [t.rank for t in job.ranks]
        for t in again.ranks:  # the time shift onto the common base is applied to mapped columns
            assert t.start.min() >= 0
        loaded += 1
    assert loaded >= 12
    build_graph(load_job(shared("h100-nanogpt-8rank"), workers=1))  # from the cache
    assert watch == []
    assert snapshot() == before
    entries = [p for p in (own_cache / "ranks").iterdir() if p.suffix == ".rank"]
    assert entries, "the cache should hold the parsed ranks"
    assert all(not str(p.resolve()).startswith(str(SHARED_TRACES)) for p in entries)


@pytest.mark.slow  # one of the suite's longest: handed to a worker first
def test_parallel_workers_and_the_cli_write_nothing_there(own_cache: Path) -> None:
    """Worker processes and the CLI are not seen by the audit hook: the snapshot catches them."""
    before = snapshot()
    load_job(shared("h100-nanogpt-8rank"), workers=2)  # parsing processes save the cache entries
    env = {**os.environ, "LUMOS_CACHE_DIR": str(own_cache)}
    for args in (["inspect", str(shared("dlrm-v100-8rank"))], ["replay", str(shared("a100-ddp-2rank"))]):
        out = subprocess.run(
            [sys.executable, "-m", "lumos_core", *args], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
    assert snapshot() == before


def test_the_cache_lives_in_the_user_cache_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LUMOS_CACHE_DIR", raising=False)
    import platformdirs

    assert cache.cache_dir() == Path(platformdirs.user_cache_dir("lumos", appauthor=False))
    assert not str(cache.entry_path(shared("a100-ddp-2rank", "rank0.json.gz"))).startswith(str(SHARED_TRACES))


def test_the_audit_hook_sees_writes(
    watch: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard itself: with the watched root pointed at a scratch folder, real writes are caught."""
    monkeypatch.setattr(sys.modules[__name__], "SHARED_TRACES", tmp_path)
    (tmp_path / "a.json").write_bytes(b"{}")  # open(..., "wb")
    os.close(os.open(tmp_path / "b.json", os.O_WRONLY | os.O_CREAT))
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.json").read_bytes()  # reading is fine
    assert len(watch) == 3, watch
    watch.clear()
