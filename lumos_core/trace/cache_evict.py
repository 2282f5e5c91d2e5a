"""Keep the cache folder within its cap: what is in it, what is stale, and least-recently-used eviction.

The folder holds (see :mod:`lumos_core.trace.cache`): ``ranks/<key>.rank`` entries with their
``sources/<key>.src``; the demo job's generated folder ``demo-<hash>/`` (:mod:`lumos_core.synth.demo`); the
compiled kernels ``numba/`` (:mod:`lumos_core.jit`, when they live under this folder). All of it
counts towards the cap, in bytes on disk (allocated blocks, not file lengths).

A pass (:func:`enforce`), run by the loader after a job wrote entries and by ``lumos cache prune``:

1. drops entries whose source trace is gone or changed (its ``.src`` no longer matches the file),
   entries without a ``.src`` (an older Lumos wrote them; they are never read again), and leftovers
   of crashed writes (and ``.src`` files without their entry) older than an hour;
2. then, while the folder is over the cap, deletes the least recently used unit: an entry (used =
   written or last read, see ``cache._mark_used``) or the demo folder; the compiled kernels go last
   (small, shared by every job, and seconds to rebuild).

An entry that a running Lumos maps is never deleted (:mod:`lumos_core.trace.cache_locks`), so a pass
can end over the cap while another process holds more than the cap; the next pass catches up.
Passes are serialised by a lock file, so two processes writing at once end within the cap.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from lumos_core.trace import cache
from lumos_core.trace.cache_config import CacheConfig, format_size, free_space_problem
from lumos_core.trace.cache_locks import exclusive, remove_unless_in_use
from lumos_core.trace.model import RankTrace

STRAY_AGE_S = 3600.0  # a temporary file this old is a crashed write's, not one in progress
KINDS = ("entry", "demo", "kernels", "stray")


@dataclass
class Unit:
    """What is evicted at once: an entry with its ``.src``, the demo folder, the kernels folder, or
    a stray file (a write in progress, or a crashed one's leftover)."""

    kind: str
    path: Path
    nbytes: int
    used: float  # unix time of the last use (modification time)
    source_file: Path | None = None  # entries: their .src

    def source(self) -> dict[str, Any] | None:
        if self.source_file is None:
            return None
        try:
            ident = orjson.loads(self.source_file.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return ident if isinstance(ident, dict) else None


@dataclass
class PassReport:
    stale: list[Unit] = field(default_factory=list)
    evicted: list[Unit] = field(default_factory=list)
    in_use: int = 0  # units over the cap that a running Lumos holds
    total: int = 0  # bytes after the pass
    cap: int = 0
    ran: bool = True  # False: another pass held the lock too long (or the folder is unusable)


def _disk_bytes(st: os.stat_result) -> int:
    blocks = getattr(st, "st_blocks", None)
    return int(blocks) * 512 if blocks is not None else int(st.st_size)


def _tree(path: Path) -> tuple[int, float]:
    """Bytes on disk and newest modification time of the files under ``path``."""
    total, newest = 0, 0.0
    for folder, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            total += _disk_bytes(st)
            newest = max(newest, st.st_mtime)
    return total, newest


def scan(root: Path) -> list[Unit]:
    """Every unit of the cache folder ``root`` (empty if it does not exist)."""
    units: list[Unit] = []
    ranks: dict[str, dict[str, tuple[Path, os.stat_result]]] = {}
    listing = []
    for sub in ("ranks", "sources"):
        try:
            listing += list(os.scandir(root / sub))
        except OSError:
            pass
    for e in listing:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        stem, dot, suffix = e.name.rpartition(".")
        if dot and suffix in ("rank", "src") and e.is_file(follow_symlinks=False):
            ranks.setdefault(stem, {})[suffix] = (Path(e.path), st)
        elif e.is_dir(follow_symlinks=False):
            nbytes, newest = _tree(Path(e.path))
            units.append(Unit("stray", Path(e.path), nbytes, max(newest, st.st_mtime)))
        else:
            units.append(Unit("stray", Path(e.path), _disk_bytes(st), st.st_mtime))
    for parts in ranks.values():
        if "rank" not in parts:  # a .src whose entry is being written (or was deleted)
            path, st = parts["src"]
            units.append(Unit("stray", path, _disk_bytes(st), st.st_mtime))
            continue
        path, st = parts["rank"]
        src = parts.get("src")
        nbytes = _disk_bytes(st) + (_disk_bytes(src[1]) if src else 0)
        units.append(Unit("entry", path, nbytes, st.st_mtime, src[0] if src else None))
    try:
        top = list(os.scandir(root))
    except OSError:
        top = []
    for e in top:
        if not e.is_dir(follow_symlinks=False):
            continue
        kind = (
            "demo"
            if e.name.startswith("demo-")
            else "kernels"
            if e.name == "numba"
            else "stray"
            if e.name.startswith((".demo-", ".evicted-"))
            else None
        )
        if kind is not None:
            nbytes, newest = _tree(Path(e.path))
            units.append(Unit(kind, Path(e.path), nbytes, newest or e.stat().st_mtime))
    return units


def stale_reason(unit: Unit, now: float | None = None) -> str | None:
    """Why ``unit`` is of no further use (and is dropped whatever the cap), or None."""
    now = time.time() if now is None else now
    if unit.kind == "stray":
        return "left over by a crashed write" if now - unit.used > STRAY_AGE_S else None
    if unit.kind != "entry":
        return None
    ident = unit.source()
    if ident is None:
        return "written by an older Lumos (no source recorded)"
    try:
        if cache.key_of(ident) != unit.path.stem:
            return "written by an older Lumos"
        st = os.stat(ident["path"])  # the path was resolved when the entry was written
    except FileNotFoundError:
        return "its trace file no longer exists"
    except (OSError, KeyError, TypeError):
        return "its trace file cannot be read"
    current = {"path": ident["path"], "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
    return None if current == ident else "its trace file changed"


def remove(unit: Unit) -> bool:
    """Delete ``unit``; False if a running Lumos holds it (or it cannot be deleted)."""
    if unit.kind == "entry":
        if not remove_unless_in_use(unit.path):
            return False
        if unit.source_file is not None:
            unit.source_file.unlink(missing_ok=True)
        return True
    if not unit.path.is_dir():
        try:
            unit.path.unlink(missing_ok=True)
        except OSError:
            return False
        return True
    # A folder is renamed out of the way first: whoever looks for it next finds it absent (and
    # regenerates the demo or recompiles), never half deleted. Windows refuses while files are open.
    hidden = unit.path.with_name(f".evicted-{unit.path.name}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.replace(unit.path, hidden)
    except OSError:
        return False
    shutil.rmtree(hidden, ignore_errors=True)
    return True


def enforce(config: CacheConfig, drop_stale: bool = True) -> PassReport:
    """One eviction pass (see the module doc) under the folder's lock."""
    report = PassReport(cap=config.cap())
    with exclusive(config.root) as got:
        if not got:
            report.ran = False
            return report
        now = time.time()
        keep = []
        for u in scan(config.root):
            if drop_stale and stale_reason(u, now) is not None and remove(u):
                report.stale.append(u)
            else:
                keep.append(u)
        total = sum(u.nbytes for u in keep)
        for u in sorted(keep, key=lambda u: (u.kind == "kernels", u.used)):
            if total <= report.cap:
                break
            if u.kind == "stray":  # a write in progress: it becomes an entry or goes away
                continue
            if remove(u):
                total -= u.nbytes
                report.evicted.append(u)
            else:
                report.in_use += 1
        report.total = total
    return report


def after_load(config: CacheConfig, fresh: dict[Path, RankTrace]) -> str | None:
    """After a job was loaded: ``fresh`` are the ranks parsed afresh, which the loader tried to
    cache. Runs an eviction pass if any entry was written; returns the one warning for the job when
    some are not in the cache (``not cached: 0.4 GB free on ...``), else None. Never raises."""
    if not fresh:
        return None
    evicted: list[Path] = []
    try:
        written = [f for f in fresh if cache.entry_exists(f, config.root)]
        missing = [f for f in fresh if f not in set(written)]
        if written:
            enforce(config)
            evicted = [f for f in written if not cache.entry_exists(f, config.root)]
        # the bytes the skipped entries needed: what save() checked against the free space
        problem = free_space_problem(config.root, sum(cache.entry_bytes(fresh[f]) for f in missing))
    except OSError as exc:
        return f"not cached: the cache folder {config.root} is not usable ({exc.strerror or exc})"
    if missing and problem is not None:
        return f"not cached: {problem}"
    if missing:
        return (
            f"not cached: {len(missing)} of {len(fresh)} rank file(s) could not be written to "
            f"{config.root} (it may be read-only); the next open parses them again"
        )
    if evicted:
        size = sum(cache.entry_bytes(r) for r in fresh.values())
        return (
            f"not cached: {len(evicted)} of {len(fresh)} rank file(s) evicted at once, the job's "
            f"columns ({format_size(size)}) being more than the cache's cap of {config.describe_cap()}; "
            "raise it with --cache-max or LUMOS_CACHE_MAX"
        )
    return None


def clear_all(config: CacheConfig) -> tuple[int, int]:
    """Delete everything of the cache folder but what a running Lumos maps: (units removed, kept)."""
    removed = kept = 0
    with exclusive(config.root) as got:
        if not got:
            return 0, 0
        for u in scan(config.root):
            if remove(u):
                removed += 1
            else:
                kept += 1
    return removed, kept
