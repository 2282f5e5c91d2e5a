"""On-disk cache of parsed ranks, so re-opening an unchanged folder is near-instant.

Entries live in the user cache directory (never next to the traces: trace folders are read-only
input), one uncompressed ``.npz`` per rank file, keyed by the file's identity (resolved path, size,
modification time, inode) and the loader version. A changed file gets a new key; an entry that
cannot be read (truncated by a crash, written by another version) is deleted and rebuilt.
``LUMOS_CACHE_DIR`` overrides the location (tests use it).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import platformdirs

from .trace import COLLECTIVE_COLUMNS, Collectives, Iteration, Lane, LaneRole, RankTrace

# Bump when the parsed representation changes: old entries are then simply never looked up.
LOADER_VERSION = "1"

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
    "args_offsets",
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
    return (root or cache_dir()) / "ranks" / f"{cache_key(path)}.npz"


def save(rank: RankTrace, path: Path, root: Path | None = None) -> None:
    """Write ``rank`` (as parsed, rank-local times) to the cache; failures are silent (cache is optional)."""
    try:
        target = entry_path(path, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {name: getattr(rank, name) for name in _ARRAYS}
        for col in COLLECTIVE_COLUMNS:
            arrays[f"coll_{col}"] = getattr(rank.collectives, col)
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
        }
        arrays["meta"] = np.frombuffer(orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS), np.uint8)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, target)
    except (OSError, TypeError, ValueError):
        return


def load(path: Path, root: Path | None = None) -> RankTrace | None:
    """The cached parse of ``path``, or None (absent, stale or corrupt: a corrupt entry is removed)."""
    try:
        target = entry_path(path, root)
    except OSError:
        return None
    if not target.exists():
        return None
    try:
        # Open the file ourselves: np.load leaks its handle when the zip is corrupt.
        with open(target, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = orjson.loads(arrays.pop("meta").tobytes())
        coll = Collectives(**{c: arrays.pop(f"coll_{c}") for c in COLLECTIVE_COLUMNS})
        lanes = [
            Lane(index=i, is_gpu=bool(g), pid=p, tid=t, name=n, role=LaneRole(r), device=d, stream=s)
            for i, g, p, t, n, r, d, s in meta["lanes"]
        ]
        iterations = [Iteration(*row) for row in meta["iterations"]]
        return RankTrace(
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
            **{k: arrays[k] for k in _ARRAYS},
        )
    except Exception:
        try:
            target.unlink()
        except OSError:
            pass
        return None


def clear(root: Path | None = None) -> int:
    """Delete every cached rank; returns how many entries were removed."""
    folder = (root or cache_dir()) / "ranks"
    n = 0
    if folder.is_dir():
        for f in folder.glob("*.npz"):
            try:
                f.unlink()
                n += 1
            except OSError:
                pass
    return n
