"""Read one Kineto trace file into a :class:`~lumos_core.trace.model.RankTrace` (columnar, rank-local time).

This is the per-rank work the loader runs in parallel processes: read (gzip detected by its magic
bytes, not by the file name), parse with orjson, convert the event dicts to numpy columns in one
pass, then derive what needs only this rank (nesting, launch links, collectives, stream roles,
iterations). The dict tree is dropped before returning, so a worker holds one rank's tree at most.

Times here are nanoseconds from the rank's own first timestamp; the loader later moves every rank
onto the job's common, clock-aligned time base.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

import orjson

from lumos_core.errors import TraceError
from lumos_core.trace.json_stream import EventStream, NotStreamable
from lumos_core.trace.kineto_columns import EventColumns, build_rank
from lumos_core.trace.model import RankTrace

WHOLE_DOCUMENT_FACTOR = 10  # memory of orjson's dict tree of a whole trace, per byte of text


def read_trace_json(path: str | Path, notes: list[str] | None = None) -> Any:
    """Read and parse a trace file (plain or gzip JSON). Raises TraceError with a useful message.

    Problems that were worked around (bytes that are not UTF-8) are appended to ``notes``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise TraceError("is a folder, not a trace file", str(p)) from None
    except OSError as exc:
        raise TraceError(f"cannot read file ({exc.strerror or exc})", str(p)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"gzip data is truncated or corrupt ({exc})", str(p)) from None
    if not data.strip():
        raise TraceError("file is empty", str(p))
    not_json = _not_json(data)
    if not_json:
        raise TraceError(f"not valid JSON, so not a Kineto trace: {not_json}", str(p))
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        first_error = exc
    # orjson rejects NaN/Infinity literals and integers beyond 64 bits, which some writers emit;
    # the standard library accepts them. Only if both fail is the file really not JSON.
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        pass
    # A few bytes that are not UTF-8 (a name written in another encoding, a flipped bit) must not
    # cost the whole rank: replace them and say so.
    try:
        doc = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        pass
    else:
        if notes is not None:
            notes.append("the file contains bytes that are not UTF-8; they were replaced by \ufffd")
        return doc
    hint = ""
    if first_error.pos >= len(data.rstrip()) - 1:
        hint = " - the file looks truncated (the writing job may have been killed)"
    elif p.suffix == ".gz" and data[:1] not in (b"{", b"["):
        hint = " - named .gz but is not gzip data"
    raise TraceError(f"not valid JSON: {first_error.msg} at byte {first_error.pos}{hint}", str(p))


_SIGNATURES = {  # what a file that is not JSON most often is
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a zip archive",
    b"\x28\xb5\x2f\xfd": "zstd-compressed data",
    b"BZh": "bzip2-compressed data",
    b"\xfd7zXZ": "xz-compressed data",
    b"\x7fELF": "a program (ELF)",
    b"SQLite format": "an SQLite database",
}


def _not_json(data: bytes) -> str:
    """Why ``data`` cannot be a JSON document (its first bytes say what it is), or "" when it may be."""
    head = data[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return ""
    for sig, what in _SIGNATURES.items():
        if head.startswith(sig):
            return f"the file is {what}"
    if head[:1] and (head[:1] < b" " or head[:1] > b"~"):
        return "the file starts with binary data, not with '{'"
    return ""


def parse_trace_file(path: str | Path) -> RankTrace:
    """Parse one rank file into a RankTrace with rank-local times (rank = -1: assigned by the loader).

    The event array is read in batches (:mod:`lumos_core.trace.json_stream`), so only one batch of dicts
    exists at a time; files of another shape, or broken ones, take the whole-document path, which
    also produces the precise error message."""
    # The dict trees hold many containers and no cycles; letting the cyclic garbage collector scan
    # them again and again while we build columns costs up to 2x.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _parse_streaming(Path(path))
        except NotStreamable as exc:
            # The whole document's dict tree takes ~10x the text. A file the machine cannot hold
            # that way (a multi-GB trace cut short by a killed job) gets the batch reader's reason
            # instead of the OOM killer.
            need = text_bytes(Path(path)) * WHOLE_DOCUMENT_FACTOR
            if need > available_memory():
                raise TraceError(
                    f"cannot be read in batches ({exc}; the file may be truncated) and parsing it "
                    f"whole would need about {need / 2**30:.1f} GiB of memory, more than is available",
                    str(path),
                ) from None
            notes: list[str] = []
            doc = read_trace_json(path, notes)
            rank = convert_document(doc, str(path))
            rank.warnings.extend(notes)
            return rank
    finally:
        if was_enabled:
            gc.enable()


def text_bytes(path: Path) -> int:
    """Size of the JSON text of ``path``: the file size, or a gzip file's recorded uncompressed size."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")  # size mod 2**32
    except OSError:
        return 0
    # >4 GiB wrapped: assume 8x compression. Deflate cannot expand more than ~1032x, so a larger
    # ISIZE is a corrupt trailer, not a huge file (a 200-byte broken .gz must not "need" GiBs).
    return isize if size <= isize <= size * 1032 else size * 8


def available_memory() -> int:
    """Memory the system can give this process now (bytes)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _parse_streaming(path: Path) -> RankTrace:
    cols = EventColumns()
    try:
        with path.open("rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw, mode="rb") if gz else contextlib.nullcontext(raw) as fh:
                stream = EventStream(fh)
                for events in stream.chunks():
                    cols.add(events)
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise NotStreamable(str(exc)) from None  # the whole-document path reports it precisely
    return build_rank(cols, stream.metadata, str(path))


def _events_of(doc: Any, path: str) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError("JSON but not a Kineto trace: no 'traceEvents' list", path)
        meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        return events, meta
    if isinstance(doc, list):  # the Chrome trace "array format" (e.g. PyTorch 1.8)
        if doc and not any(isinstance(e, dict) and "ph" in e for e in doc[:100]):
            raise TraceError("JSON list but not a trace: its items are not trace events", path)
        return doc, {}
    raise TraceError("JSON but not a Kineto trace: top level is neither an object nor a list", path)


def convert_document(doc: Any, path: str) -> RankTrace:
    """Turn a parsed trace document into columns."""
    events, meta = _events_of(doc, path)
    cols = EventColumns()
    cols.add(events)
    del events, doc
    return build_rank(cols, meta, path)
