"""On-disk cache of parsed ranks, so re-opening an unchanged folder is near-instant.

Entries live in the user cache directory (never next to the traces: trace folders are read-only
input), one folder of ``.npy`` columns per rank file, keyed by the file's identity (resolved path,
size, modification time, inode) and the loader version. Columns are memory-mapped copy-on-write,
so re-opening costs almost nothing until the data is touched. A changed file gets a new key; an
entry that cannot be read (truncated by a crash, written by another version) is deleted and rebuilt.
``LUMOS_CACHE_DIR`` overrides the location (tests use it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import platformdirs

from lumos_core.trace.memory import MEMORY_COLUMNS, MemoryRecords
from lumos_core.trace.model import COLLECTIVE_COLUMNS, Collectives, Iteration, Lane, LaneRole, RankTrace

# Bump when the parsed representation changes: old entries are then simply never looked up.
LOADER_VERSION = "4"  # 4: SendRecv kernels issued by an all-to-all are ALL_TO_ALL

_ARRAYS = (
    "kind",
    "cat",
    "name",
    "lane",
    "start",
    "dur",
    "correlation",
    "external_id",
    "depth",
    "parent",
    "launch",
    "args_start",
    "args_len",
    "args_data",
    "lane_begin",
    "flow_kind",
    "flow_id",
    "flow_phase",
    "flow_ts",
    "flow_event",
    "instant_name",
    "instant_ts",
)


def cache_dir() -> Path:
    env = os.environ.get("LUMOS_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("lumos", appauthor=False))


def cache_key(path: Path) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{LOADER_VERSION}"
    return hashlib.sha1(ident.encode()).hexdigest()


def entry_path(path: Path, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "ranks" / cache_key(path)


def entry_exists(path: Path, root: Path | None = None) -> bool:
    """Whether a complete entry for ``path`` is in the cache (it may still fail to load)."""
    try:
        return (entry_path(path, root) / "meta.json").exists()
    except OSError:
        return False


def save(rank: RankTrace, path: Path, root: Path | None = None) -> None:
    """Write ``rank`` (as parsed, rank-local times) to the cache; failures are silent (cache is optional)."""
    tmp = None
    try:
        target = entry_path(path, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, suffix=".tmp"))
        arrays: dict[str, Any] = {name: getattr(rank, name) for name in _ARRAYS}
        for col in COLLECTIVE_COLUMNS:
            arrays[f"coll_{col}"] = getattr(rank.collectives, col)
        for col in MEMORY_COLUMNS:
            arrays[f"mem_{col}"] = getattr(rank.memory, col)
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
        meta = {
            "file": rank.file,
            "strings": rank.strings,
            "lanes": [
                [ln.index, ln.is_gpu, ln.pid, ln.tid, ln.name, int(ln.role), ln.device, ln.stream]
                for ln in rank.lanes
            ],
            "iterations": [
                [it.name, it.step, it.cpu_start, it.cpu_end, it.gpu_start, it.gpu_end]
                for it in rank.iterations
            ],
            "metadata": rank.metadata,
            "raw_shift_ns": rank.raw_shift_ns,
            "warnings": rank.warnings,
            "columns": sorted(arrays),
        }
        # meta.json is written last: an entry without it is incomplete and never read.
        (tmp / "meta.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        tmp = None
    except (OSError, TypeError, ValueError):
        return
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def load(path: Path, root: Path | None = None) -> RankTrace | None:
    """The cached parse of ``path``, or None (absent, stale or corrupt: a corrupt entry is removed)."""
    try:
        target = entry_path(path, root)
    except OSError:
        return None
    if not (target / "meta.json").exists():
        return None
    try:
        meta = orjson.loads((target / "meta.json").read_bytes())
        arrays = {}
        for name in meta["columns"]:
            f = target / f"{name}.npy"
            # Copy-on-write mapping: pages are read when used, and in-place edits (the time shift
            # applied when ranks are put on one time base) never write back into the cache.
            arrays[name] = (
                np.load(f, mmap_mode="c", allow_pickle=False)
                if f.stat().st_size > 1 << 16
                else np.load(f, allow_pickle=False)
            )
        coll = Collectives(**{c: arrays.pop(f"coll_{c}") for c in COLLECTIVE_COLUMNS})
        # An entry written before memory records were kept has no mem_* columns: the KeyError
        # below makes it count as corrupt, so it is deleted and the file parsed again.
        memory = MemoryRecords(**{c: arrays.pop(f"mem_{c}") for c in MEMORY_COLUMNS})
        lanes = [
            Lane(index=i, is_gpu=bool(g), pid=p, tid=t, name=n, role=LaneRole(r), device=d, stream=s)
            for i, g, p, t, n, r, d, s in meta["lanes"]
        ]
        iterations = [Iteration(*row) for row in meta["iterations"]]
        rank = RankTrace(
            rank=-1,
            file=meta["file"],
            rank_source="",
            strings=meta["strings"],
            lanes=lanes,
            collectives=coll,
            iterations=iterations,
            metadata=meta["metadata"],
            raw_shift_ns=int(meta["raw_shift_ns"]),
            warnings=list(meta["warnings"]),
            memory=memory,
            **{k: arrays[k] for k in _ARRAYS},
        )
        _check_shapes(rank)
        memory.check()
        return rank
    except Exception:  # any failure to read an entry means: rebuild it
        shutil.rmtree(target, ignore_errors=True)
        return None


def _check_shapes(rank: RankTrace) -> None:
    """Raise ValueError unless the columns fit together (free: shapes only, plus two elements).

    A column of another length (a partial write, a file from another entry) would otherwise load
    and fail later, or index the wrong events."""
    n = len(rank.start)
    per_event = [
        getattr(rank, k) for k in _ARRAYS if not k.startswith(("flow_", "instant_", "args_data", "lane_"))
    ]
    flows = {len(getattr(rank, k)) for k in _ARRAYS if k.startswith("flow_")}
    coll = {len(getattr(rank.collectives, c)) for c in COLLECTIVE_COLUMNS}
    if (
        any(a.ndim != 1 or len(a) != n for a in per_event)
        or len(flows) > 1
        or len(coll) > 1
        or len(rank.instant_name) != len(rank.instant_ts)
        or len(rank.lane_begin) != len(rank.lanes) + 1
        or (len(rank.lane_begin) and int(rank.lane_begin[-1]) != n)
    ):
        raise ValueError("inconsistent columns")


def clear(root: Path | None = None) -> int:
    """Delete every cached rank; returns how many entries were removed."""
    folder = (root or cache_dir()) / "ranks"
    n = 0
    if folder.is_dir():
        for f in folder.iterdir():
            shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink(missing_ok=True)
            n += 1
    return n
