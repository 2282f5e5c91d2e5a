"""Edit the header of a parse-cache entry in tests (damage it the ways a crash or another version can)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import orjson

from lumos_core.trace import cache

_PREFIX = struct.Struct("<8sQ")


def edit_header(entry: Path, edit: Callable[[dict], object]) -> None:
    """Rewrite ``entry`` with ``edit`` applied to its header; the data region is kept as it was
    (moved to the new header's end, so the offsets still point at the same bytes)."""
    header, data_start = cache.read_header(entry)
    edit(header)
    write_raw_header(entry, orjson.dumps(header), data_start)


def write_raw_header(entry: Path, raw: bytes, data_start: int | None = None) -> None:
    """Replace the header bytes of ``entry`` by ``raw`` (any bytes), keeping its data region."""
    blob = entry.read_bytes()
    if data_start is None:
        _, n = _PREFIX.unpack(blob[: _PREFIX.size])
        data_start = -(-(_PREFIX.size + n) // 64) * 64
    magic = blob[:8]
    head = _PREFIX.pack(magic, len(raw)) + raw
    head += bytes(-(-len(head) // 64) * 64 - len(head))
    entry.write_bytes(head + blob[data_start:])
