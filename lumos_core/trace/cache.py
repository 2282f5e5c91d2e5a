"""On-disk cache of parsed ranks, so re-opening an unchanged folder is near-instant.

Entries live in the user cache directory (never next to the traces: trace folders are read-only
input), one file per rank file, keyed by the file's identity (resolved path, size, modification
time, inode) and the loader version. A changed file gets a new key; an entry that cannot be read
(truncated by a crash, written by another version) is deleted and rebuilt. The folder is the
``root`` argument (the loader passes its :class:`~lumos_core.trace.cache_config.CacheConfig`'s);
without one, ``LUMOS_CACHE_DIR`` (a user override; tests use it), else the user cache directory.

An entry is one file, so that opening it costs one mapping rather than one per column:

* 8 bytes :data:`MAGIC`, 8 bytes little-endian length of the header;
* the header, orjson: ``meta`` (strings, lanes, iterations, metadata, ...), ``columns`` (name ->
  [dtype, shape, offset]) and ``size`` (bytes of the data region);
* the data region, starting at the next multiple of 64 bytes: every column's raw bytes at its
  offset (a multiple of 64 from the region's start).

The file is mapped read-only and every column is a view into the mapping: pages are read when
used, nothing can write back into the cache, and a column that must change (the time shift applied
when ranks are put on one time base) becomes a new array. Read-only pages are always the file's own,
so a big job can hand them back after use and read them again from the page cache
(:mod:`lumos_core.os_memory`).

Beside ``ranks/<key>.rank``, ``sources/<key>.src`` names the entry's source file (resolved path,
size, modification time, inode), so that entries of deleted or changed traces can be found and
dropped (:mod:`lumos_core.trace.cache_evict`, which also keeps the folder under its size cap). A
write that would leave the volume too full is skipped
(:func:`lumos_core.trace.cache_config.free_space_problem`). A read holds a shared lock on the entry
for as long as its columns are mapped (:mod:`lumos_core.trace.cache_locks`) and marks it used: its
modification time is the eviction's recency.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from lumos_core.trace.cache_config import default_root, free_space_problem
from lumos_core.trace.cache_locks import hold_shared, remove_unless_in_use
from lumos_core.trace.memory import MEMORY_COLUMNS, MemoryRecords
from lumos_core.trace.model import (
    COLLECTIVE_COLUMNS,
    CUDA_SYNC_COLUMNS,
    Collectives,
    CudaSyncs,
    Iteration,
    Lane,
    LaneRole,
    RankTrace,
)

# Bump when the parsed representation changes: old entries are then simply never looked up.
LOADER_VERSION = "7"  # 5: one file per rank; cuda_sync args as columns; 6: sources/<key>.src per entry;
# 7: MTIA/XPU/PrivateUse1 categories are device work

MAGIC = b"LUMOSRK\x05"
_PREFIX = struct.Struct("<8sQ")
_ALIGN = 64
_MAX_HEADER = 1 << 31  # a longer header is corrupt

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
_GROUPS = (("coll_", COLLECTIVE_COLUMNS), ("mem_", MEMORY_COLUMNS), ("sync_", CUDA_SYNC_COLUMNS))


SOURCE_SUFFIX = ".src"


def source_path(entry: Path) -> Path:
    """Where the ``.src`` of ``entry`` (``<root>/ranks/<key>.rank``) is: ``<root>/sources/<key>.src``
    (a folder of their own, so that ``ranks/`` holds one file per cached rank file)."""
    return entry.parent.parent / "sources" / f"{entry.stem}{SOURCE_SUFFIX}"


def cache_dir() -> Path:
    """The default cache folder (``LUMOS_CACHE_DIR``, else the user cache folder); callers that
    are given a :class:`~lumos_core.trace.cache_config.CacheConfig` use its ``root`` instead."""
    return default_root()


def source_identity(path: Path) -> dict[str, Any]:
    """What an entry of ``path`` is keyed on: a change to any of it makes the entry stale."""
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


def key_of(ident: dict[str, Any]) -> str:
    text = f"{ident['path']}|{ident['size']}|{ident['mtime_ns']}|{ident['ino']}|{LOADER_VERSION}"
    return hashlib.sha1(text.encode()).hexdigest()


def cache_key(path: Path) -> str:
    return key_of(source_identity(path))


def entry_path(path: Path, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "ranks" / f"{cache_key(path)}.rank"


def entry_exists(path: Path, root: Path | None = None) -> bool:
    """Whether an entry for ``path`` is in the cache (it may still fail to load)."""
    try:
        return entry_path(path, root).is_file()
    except OSError:
        return False


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _columns(rank: RankTrace) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {name: getattr(rank, name) for name in _ARRAYS}
    syncs = rank.cuda_syncs if rank.cuda_syncs is not None else CudaSyncs.empty()
    for prefix, cols in _GROUPS:
        group = {"coll_": rank.collectives, "mem_": rank.memory, "sync_": syncs}[prefix]
        for col in cols:
            arrays[prefix + col] = getattr(group, col)
    return {k: np.ascontiguousarray(v) for k, v in arrays.items()}


def entry_bytes(rank: RankTrace) -> int:
    """About the bytes of ``rank``'s entry (its columns; the header adds kilobytes)."""
    return sum(_align(a.nbytes) for a in _columns(rank).values())


def save(rank: RankTrace, path: Path, root: Path | None = None) -> bool:
    """Write ``rank`` (as parsed, rank-local times) to the cache; True if it was written. Failures are
    silent (the cache is optional), and so is a write that would leave the volume too full: the
    loader says so once per job (:func:`lumos_core.trace.cache_evict.after_load`)."""
    tmp = None
    try:
        ident = source_identity(path)
        target = (root or cache_dir()) / "ranks" / f"{key_of(ident)}.rank"
        arrays = _columns(rank)
        columns: dict[str, list[Any]] = {}
        size = 0
        for name, arr in arrays.items():
            if arr.dtype.hasobject:
                raise TypeError(f"column {name} holds Python objects")
            size = _align(size)
            columns[name] = [arr.dtype.str, list(arr.shape), size]
            size += arr.nbytes
        header = orjson.dumps(
            {
                "meta": {
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
                },
                "columns": columns,
                "size": size,
            },
            option=orjson.OPT_NON_STR_KEYS,
        )
        head = _PREFIX.pack(MAGIC, len(header)) + header
        if free_space_problem(target.parent, _align(len(head)) + size) is not None:
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_source(source_path(target), ident)
        fd, name = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            f.write(head + bytes(_align(len(head)) - len(head)))
            pos = 0
            for cname, arr in arrays.items():
                off = columns[cname][2]
                f.write(bytes(off - pos))
                f.write(arr.data if arr.ndim else arr.tobytes())
                pos = off + arr.nbytes
        # The complete file appears under its name at once: a crash leaves only a stray .tmp.
        if target.is_dir():  # never ours, but never in the way either
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        tmp = None
        return True
    except (OSError, TypeError, ValueError, BufferError):
        return False
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _write_source(dest: Path, ident: dict[str, Any]) -> None:
    """The ``.src`` file naming the entry's source (written first: an entry never lacks one)."""
    dest.parent.mkdir(exist_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(ident))
        os.replace(name, dest)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def read_header(entry: Path) -> tuple[dict[str, Any], int]:
    """The header of an entry file and where its data region starts; ValueError if it is not one."""
    with open(entry, "rb") as f:
        return _read_header(f)


def _read_header(f: Any) -> tuple[dict[str, Any], int]:
    f.seek(0)
    prefix = f.read(_PREFIX.size)
    if len(prefix) != _PREFIX.size:
        raise ValueError("entry shorter than its prefix")
    magic, n = _PREFIX.unpack(prefix)
    if magic != MAGIC or n > _MAX_HEADER:
        raise ValueError("not an entry of this version")
    raw = f.read(n)
    if len(raw) != n:
        raise ValueError("entry header cut short")
    header = orjson.loads(raw)
    if not isinstance(header, dict):
        raise ValueError("entry header is not an object")
    data_start = _align(_PREFIX.size + n)
    if os.fstat(f.fileno()).st_size != data_start + int(header["size"]):
        raise ValueError("entry of the wrong size (cut short or appended to)")
    return header, data_start


def _views(f: Any, header: dict[str, Any], data_start: int) -> dict[str, np.ndarray]:
    """Every column as a view into one read-only mapping of the entry. Read-only, so that nothing can
    change a column in place (a step that needs other values makes new arrays, as ``shift`` does), and
    its pages, always the file's own, can be handed back and read again at no risk
    (``os_memory.page_out``)."""
    size = int(header["size"])
    cols = header["columns"]
    # The file is opened once (by load) for both mappings and given to np.memmap open: given a path,
    # np.memmap resolves it again for each mapping (a few system calls each: 8 % of a cached load).
    # Each mapping keeps a duplicate of the descriptor, and with it the reader's shared lock.
    mapped = np.memmap(f, np.uint8, mode="r") if size else None
    out: dict[str, np.ndarray] = {}
    for name, (dtype_str, shape, offset) in cols.items():
        dtype = np.dtype(dtype_str)
        if dtype.hasobject or dtype.kind not in "biuf":
            raise ValueError(f"column {name}: unexpected dtype {dtype_str}")
        shape = tuple(int(s) for s in shape)
        offset = int(offset)
        count = math.prod(shape)  # Python ints: no overflow, and no numpy call per column
        nbytes = count * dtype.itemsize
        if min(shape, default=0) < 0 or offset < 0 or offset % _ALIGN or offset + nbytes > size:
            raise ValueError(f"column {name} lies outside the entry")
        if count == 0:
            out[name] = np.zeros(shape, dtype)
        elif name == "args_data":
            # A mapping of its own: drop_pages gives all its pages back after sparse reads,
            # while the other columns' pages are still being read.
            out[name] = np.memmap(f, dtype, mode="r", offset=data_start + offset, shape=shape)
        else:
            out[name] = np.ndarray(shape, dtype, buffer=mapped, offset=data_start + offset)
    return out


def load(path: Path, root: Path | None = None) -> RankTrace | None:
    """The cached parse of ``path``, or None (absent, stale or corrupt: a corrupt entry is removed)."""
    try:
        target = entry_path(path, root)
    except OSError:
        return None
    if not target.exists():
        return None
    try:
        with target.open("rb") as f:
            if not hold_shared(f.fileno()):
                return None  # an evictor deleted it meanwhile: a miss (the name is no longer ours)
            _mark_used(f.fileno(), target)
            header, data_start = _read_header(f)
            arrays = _views(f, header, data_start)
        meta = header["meta"]
        # A column missing from the header (an entry written without it) raises KeyError: the
        # entry counts as corrupt, so it is deleted and the file parsed again.
        coll = Collectives(**{c: arrays.pop(f"coll_{c}") for c in COLLECTIVE_COLUMNS})
        memory = MemoryRecords(**{c: arrays.pop(f"mem_{c}") for c in MEMORY_COLUMNS})
        syncs = CudaSyncs(**{c: arrays.pop(f"sync_{c}") for c in CUDA_SYNC_COLUMNS})
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
            cuda_syncs=syncs,
            **{k: arrays[k] for k in _ARRAYS},
        )
        _check_shapes(rank)
        memory.check()
        syncs.check(len(rank))
        return rank
    except FileNotFoundError:  # evicted (or replaced) since exists(): a miss; the name is not ours now
        return None
    except Exception:  # any failure to read an entry means: rebuild it
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        return None


def _mark_used(fd: int, target: Path) -> None:
    """Set the entry's modification time to now: the least recently used entries are evicted first
    (access times are unreliable: many volumes are mounted noatime or relatime)."""
    try:
        os.utime(fd if os.utime in os.supports_fd else target)
    except OSError:  # a read-only cache folder: it is only evicted as if unused
        pass


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
    """Delete every cached rank (and stray files of the ranks folder) except those a running Lumos
    maps (:mod:`lumos_core.trace.cache_locks`); returns how many files were removed."""
    folder = (root or cache_dir()) / "ranks"
    n = 0
    if folder.is_dir():
        for f in folder.iterdir():
            if f.is_dir():
                shutil.rmtree(f, ignore_errors=True)
            elif not remove_unless_in_use(f):
                continue
            elif f.suffix == ".rank":
                source_path(f).unlink(missing_ok=True)
            n += 1
    return n
