"""Streaming writer of one Kineto trace file (gzip JSON), and the top-level metadata of a rank.

The file is written as ``{header keys..., "traceEvents": [chunk, chunk, ...], trailer keys...}``,
the keys in Kineto's textual form (:mod:`lumos_core.trace.kineto_text`), the events with orjson one
chunk at a time, so a rank never has to be held in memory whole.

Clock convention of synthetic files: every rank shares ``baseTimeNanoseconds``; a rank's raw
profiler time ``baseTimeNanoseconds + ts * 1000`` equals the job's true time plus the rank's
``lumos_clock_offset_ns`` (the error of the rank's host clock, up to ±500 µs; ranks of one node
share it). A loader that aligns clocks should recover these offsets up to one constant shared by
all ranks.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

from lumos_core.perf.hardware import GpuProfile
from lumos_core.trace.kineto_text import header_bytes, trailer_bytes

__all__ = ["BASE_TIME_NS", "TS_ORIGIN_NS", "RankTraceWriter", "device_properties"]

BASE_TIME_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, like Kineto's epoch offset
TS_ORIGIN_NS = 3_600_000_000_000  # ts of true time zero: one hour after the base (keeps ns exact)


def device_properties(gpu: GpuProfile, count: int) -> list[dict[str, Any]]:
    """``deviceProperties`` for the ``count`` GPUs of a node, as Kineto writes them."""
    major, minor = gpu.compute_capability
    return [
        {
            "id": i,
            "name": gpu.device_name,
            "totalGlobalMem": gpu.memory_bytes,
            "computeMajor": major,
            "computeMinor": minor,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "numSms": gpu.sm_count,
            "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 232448,
            "sharedMemPerMultiprocessor": 233472,
        }
        for i in range(count)
    ]


class RankTraceWriter:
    """Writes ``header``, then event chunks, then ``trailer`` into one gzip (or plain) JSON file."""

    def __init__(self, path: Path, header: dict[str, Any], compresslevel: int = 1) -> None:
        self.path = path
        self._raw = open(path, "wb")  # noqa: SIM115 - closed in close()
        if path.suffix == ".gz":
            # mtime 0 and no file name in the header: the same config gives the same bytes.
            self._f: Any = gzip.GzipFile(
                filename="", mode="wb", fileobj=self._raw, compresslevel=compresslevel, mtime=0
            )
        else:
            self._f = self._raw
        self._first = True
        self.n_events = 0
        # Top-level keys as Kineto writes them (tools find the rank in that text); events compact.
        self._f.write(header_bytes(header))

    def write(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        body = orjson.dumps(events)[1:-1]
        if not self._first:
            self._f.write(b",\n")
        self._f.write(body)
        self._first = False
        self.n_events += len(events)

    def close(self, trailer: dict[str, Any] | None = None) -> None:
        self._f.write(trailer_bytes(trailer))
        self._f.close()
        self._raw.close()

    def __enter__(self) -> RankTraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._f.closed:
            self._f.close()
        self._raw.close()
