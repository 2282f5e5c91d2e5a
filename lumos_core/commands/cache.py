"""``lumos cache info|prune|clear``: where the parse cache is, how big, and bounding it by hand."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from lumos_core.api.loading import cache_info
from lumos_core.commands.common import add_cache_max_argument, cache_config_from_args
from lumos_core.trace import cache_evict
from lumos_core.trace.cache_config import format_size

DESCRIPTION = """The cache keeps every parsed rank file as columns (memory-mapped when the folder is
opened again), the demo job and the compiled kernels. It stays under a cap (default 10 % of its
volume, at most 20 GB; --cache-max or LUMOS_CACHE_MAX), least recently used entries first, and an
entry is dropped once its trace file is deleted or changed.

  info    location, size on disk, entries, oldest/newest use, cap, stale entries
  prune   drop the entries of deleted or changed traces, then evict down to the cap
  clear   delete everything (entries a running Lumos has open are kept)"""

LABELS = {
    "entry": "rank entries",
    "demo": "demo job",
    "kernels": "compiled kernels",
    "stray": "unfinished writes",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("info", "prune", "clear"), help="what to do (see above)")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the cache folder (default: $LUMOS_CACHE_DIR, else the user cache)",
    )
    add_cache_max_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _state(d: dict[str, Any]) -> str:
    """Why the folder holds nothing, when it does not exist: not made yet, or a file is in its way, or
    a volume that stores nothing (a virtual file system such as /proc reports 0 bytes)."""
    if d["exists"]:
        return ""
    if Path(d["location"]).exists():
        return " (a file, not a folder: nothing can be cached there; use --cache-dir or LUMOS_CACHE_DIR)"
    if d["volume_total_bytes"] == 0:
        return " (on a volume of 0 bytes, not a disk: nothing can be cached there)"
    return " (not created yet)"


def info_lines(d: dict[str, Any]) -> list[str]:
    parts = ", ".join(
        f"{LABELS[k]} {format_size(n)}" for k, n in d["bytes_by_kind"].items() if n or k == "entry"
    )
    free = (
        f" (volume: {format_size(d['volume_free_bytes'])} free of {format_size(d['volume_total_bytes'])})"
        if d["volume_total_bytes"]
        else ""
    )
    return [
        f"location  {d['location']}{_state(d)}{free}",
        f"size      {format_size(d['bytes'])} on disk: {parts}",
        f"cap       {d['cap']}",
        f"entries   {d['entries']} (one per rank file); oldest used {_when(d['oldest_used'])}, "
        f"newest used {_when(d['newest_used'])}",
        f"stale     {d['stale_entries']} entries of deleted or changed traces "
        f"({format_size(d['stale_bytes'])}): `lumos cache prune` drops them",
    ]


def run(args: argparse.Namespace) -> int:
    config = cache_config_from_args(args)
    if args.action == "info":
        d = cache_info(config)
        if args.json:
            sys.stdout.write(orjson.dumps(d, option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            print("\n".join(info_lines(d)))
        return 0
    if args.action == "clear":
        removed, kept = cache_evict.clear_all(config)
        out = {"removed": removed, "in_use": kept, "location": str(config.root)}
        text = f"removed {removed} item(s) from {config.root}" + (
            f"; kept {kept} that a running Lumos has open" if kept else ""
        )
    else:
        r = cache_evict.enforce(config)
        if not r.ran:
            print(
                f"lumos cache: {config.root} is busy (another Lumos is pruning it) or unusable",
                file=sys.stderr,
            )
            return 1
        out = {
            "stale_removed": sum(u.kind == "entry" for u in r.stale),
            "stale_bytes": sum(u.nbytes for u in r.stale),
            "evicted": len(r.evicted),
            "evicted_bytes": sum(u.nbytes for u in r.evicted),
            "in_use": r.in_use,
            "bytes": r.total,
            "cap_bytes": r.cap,
            "location": str(config.root),
        }
        text = (
            f"dropped {out['stale_removed']} entries of deleted or changed traces "
            f"({format_size(out['stale_bytes'])}), evicted {out['evicted']} least recently used "
            f"({format_size(out['evicted_bytes'])}); the cache holds {format_size(r.total)} "
            f"of its {format_size(r.cap)} cap"
            + (f" ({r.in_use} over the cap kept: a running Lumos has them open)" if r.in_use else "")
        )
    if args.json:
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(text)
    return 0
