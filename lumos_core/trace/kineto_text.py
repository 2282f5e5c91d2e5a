"""The textual form of a Kineto trace file, for files Lumos writes (predictions, rebuilt and
synthetic jobs) so other tools read them like a measured job.

Tools do not only parse the JSON: Holistic Trace Analysis finds a file's rank by searching its text
for ``"rank":\\s+(\\d+)`` near the top, i.e. for the way Kineto writes ``distributedInfo``
(``"rank": 3``, with a space). So the top-level keys come in Kineto's order, two-space indented,
with Python-``json`` spacing (``", "`` and ``": "``), and events in Kineto's three-line layout::

    {
      "schemaVersion": 1,
      "deviceProperties": [
        {"id": 0, "name": "NVIDIA H100 80GB HBM3", ...}
      ],
      "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": 4, ...},
      ...
      "traceEvents": [
      {
        "ph": "X", "cat": "kernel", "name": "...", "pid": 0, "tid": 7,
        "ts": 12.345, "dur": 6.789,
        "args": {...}
      },
      ...
      ],
      "traceName": "..."
    }
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["KINETO_KEY_ORDER", "event_bytes", "header_bytes", "metadata_event_bytes", "trailer_bytes"]

# Top-level keys in the order torch.profiler (Kineto) writes them; traceName follows traceEvents.
KINETO_KEY_ORDER = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "record_shapes",
    "trace_id",
    "displayTimeUnit",
    "baseTimeNanoseconds",
)


def _value(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def header_bytes(meta: dict[str, Any]) -> bytes:
    """Everything up to and including ``"traceEvents": [`` (a newline after it)."""
    keys = [k for k in KINETO_KEY_ORDER if k in meta] + [k for k in meta if k not in KINETO_KEY_ORDER]
    lines = []
    for k in keys:
        v = meta[k]
        if k == "deviceProperties" and isinstance(v, list) and v:
            inner = ",\n".join(f"    {_value(d)}" for d in v)
            lines.append(f'  "deviceProperties": [\n{inner}\n  ]')
        else:
            lines.append(f"  {_value(k)}: {_value(v)}")
    lines.append('  "traceEvents": [\n')
    return ("{\n" + ",\n".join(lines)).encode()


def trailer_bytes(trailer: dict[str, Any] | None = None) -> bytes:
    """Everything after the last event: ``]``, the trailing keys (``traceName``) and ``}``."""
    parts = "".join(f",\n  {_value(k)}: {_value(v)}" for k, v in (trailer or {}).items())
    return f"\n  ]{parts}\n}}\n".encode()


def event_bytes(
    cat: bytes, name: bytes, pid: int | str, tid: int | str, ts_us: float, dur_us: float, args: bytes
) -> bytes:
    """One complete ("X") event; ``cat``/``name``/``args`` are JSON already (bytes)."""
    return (
        b'  {\n    "ph": "X", "cat": %s, "name": %s, "pid": %s, "tid": %s,\n'
        b'    "ts": %.3f, "dur": %.3f,\n    "args": %s\n  }'
        % (cat, name, _id(pid), _id(tid), ts_us, dur_us, args)
    )


def metadata_event_bytes(
    name: str, pid: int | str, tid: int | str, args: dict[str, Any], ts_us: float = 0.0
) -> bytes:
    """One metadata ("M") event such as ``thread_name`` or ``process_name``."""
    return b'  {\n    "name": %s, "ph": "M", "ts": %.3f, "pid": %s, "tid": %s,\n    "args": %s\n  }' % (
        _value(name).encode(),
        ts_us,
        _id(pid),
        _id(tid),
        _value(args).encode(),
    )


def _id(v: int | str) -> bytes:
    return str(v).encode() if isinstance(v, int) else _value(v).encode()
