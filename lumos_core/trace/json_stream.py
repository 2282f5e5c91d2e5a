"""Read a Kineto trace's ``traceEvents`` in chunks, so parsing memory stays bounded.

``orjson`` parses a whole document at once, and the dict tree of a trace takes about ten times the
text. Traces are one big array of small event objects, so we cut the array text at event
boundaries (a ``}`` followed by ``,`` and the next ``{``), parse a megabyte of events at a time and
hand each batch on; only the batch's dicts exist at any moment. A cut that falls inside an event
(the pattern also occurs inside nested arguments) simply fails to parse and an earlier cut is
tried. The top-level keys around the array (device properties, distributedInfo, keys written after
the array) are parsed at the end from the text outside the array.

Anything unexpected raises :class:`NotStreamable`; the caller then parses the whole document the
ordinary way, which also produces the precise error for broken files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any

import orjson

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPLIT = re.compile(rb"\}\s*,\s*(?=\{)")
# Text per parsed batch. A batch's dicts (~5x its text) are built, converted and freed while they
# are still in the core's cache: 128 KiB batches cost ~20 % less CPU per file than 1 MiB ones
# (synthetic 17 MB ranks, 0.26 vs 0.33 CPU s). An event longer than 64 blocks (8 MiB of text) goes
# to the whole-document path.
_BLOCK = 128 << 10
_MAX_PREFIX = 64 << 20  # the array must start within this much text
_MAX_TRIES = 8  # cut candidates tried per batch before reading more text
_NEAR_END = 64 << 10  # where the cut candidates are looked for first


class NotStreamable(Exception):
    """The text does not have the shape this reader handles; parse the whole document instead."""


class EventStream:
    """Iterate ``chunks()`` for lists of events; afterwards ``metadata`` holds the top-level keys."""

    def __init__(self, fh: IO[bytes], block: int = _BLOCK) -> None:
        self.fh = fh
        self.block = block
        self.metadata: dict[str, Any] = {}
        self._prefix = b""
        self._top_level_list = False

    def _read(self) -> bytes:
        return self.fh.read(self.block)

    def _find_array(self) -> bytes:
        buf = b""
        while True:
            more = self._read()
            buf += more
            stripped = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
            if stripped[:1] == b"[":  # the array format: the document is the event list
                self._top_level_list = True
                return stripped[1:]
            if stripped[:1] not in (b"{", b""):
                raise NotStreamable("not a JSON object or array")
            m = _EVENTS_KEY.search(buf)
            if m:
                self._prefix = buf[: m.start()]
                return buf[m.end() :]
            if not more or len(buf) > _MAX_PREFIX:
                raise NotStreamable("no traceEvents array near the start")

    def chunks(self) -> Iterator[list[Any]]:
        buf = self._find_array()
        eof = False
        while not eof:
            more = self._read()
            eof = not more
            buf += more
            if len(buf) < self.block and not eof:
                continue
            if not eof:
                cut = self._cut(buf)
                if cut is None:
                    if len(buf) > 64 * self.block:
                        raise NotStreamable("no event boundary found")
                    continue
                events, buf = cut
                yield events
                continue
            yield from self._finish(buf)

    def _cut(self, buf: bytes) -> tuple[list[Any], bytes] | None:
        """Parse the longest prefix of whole events; None if no candidate cut parses.

        The last few candidates are looked for near the end first: scanning the whole buffer
        for them cost as much as a tenth of the parse. Only when none of those parses is the
        search widened, to the same candidates the wide search alone would try."""
        narrow = max(0, len(buf) - _NEAR_END)
        wide = max(0, len(buf) - 4 * self.block)
        for start in (narrow, wide) if narrow > wide else (wide,):
            matches = list(_SPLIT.finditer(buf, start))
            for m in reversed(matches[-_MAX_TRIES:]):
                try:
                    # one copy of the text (b"[" + slice + b"]" made two)
                    events = orjson.loads(b"".join((b"[", memoryview(buf)[: m.start() + 1], b"]")))
                except orjson.JSONDecodeError:
                    continue
                return events, buf[m.end() :]
            if len(matches) >= _MAX_TRIES:
                return None  # the wide search would try these same candidates
        return None

    def _finish(self, buf: bytes) -> Iterator[list[Any]]:
        """The last events, the array's closing bracket and the keys after it."""
        end = len(buf)
        for _ in range(_MAX_TRIES):
            pos = buf.rfind(b"]", 0, end)
            if pos < 0:
                break
            try:
                events = orjson.loads(b"[" + buf[:pos] + b"]")
            except orjson.JSONDecodeError:
                end = pos
                continue
            suffix = buf[pos + 1 :]
            self.metadata = self._parse_metadata(suffix)
            yield events
            return
        raise NotStreamable("the event array does not end properly")

    def _parse_metadata(self, suffix: bytes) -> dict[str, Any]:
        if self._top_level_list:
            if suffix.strip():
                raise NotStreamable("text after the event array")
            return {}
        try:
            meta = orjson.loads(self._prefix + b'"traceEvents": []' + suffix)
        except orjson.JSONDecodeError as exc:
            raise NotStreamable(f"top-level keys do not parse ({exc})") from None
        if not isinstance(meta, dict):
            raise NotStreamable("top level is not an object")
        meta.pop("traceEvents", None)
        return meta
