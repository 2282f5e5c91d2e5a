"""What the memory records of a rank say: curves, peaks per iteration, the allocating operators.

Built on :class:`~lumos_core.trace.memory.MemoryRecords` (``rank.memory``). The *allocating
operator* of a record is the innermost CPU operator around it that is not a bare allocation
(``aten::empty`` and friends are how every operator allocates, so naming them says nothing):
for ``aten::empty`` inside ``aten::mm`` it is ``aten::mm``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lumos_core.trace.memory import DEVICE_CPU, DEVICE_CUDA, device_label
from lumos_core.trace.model import Job, RankTrace

__all__ = [
    "NO_MEMORY_HINT",
    "DeviceMemory",
    "IterationPeak",
    "OperatorAllocations",
    "allocating_ops",
    "format_memory_report",
    "job_has_memory",
    "measured_peaks",
    "memory_report",
    "rank_memory",
]

NO_MEMORY_HINT = (
    "no memory records in this trace: record with torch.profiler.profile(..., profile_memory=True) "
    "to see allocated/reserved memory over time and the peak per iteration"
)
# Allocation primitives: every operator allocates through them, so the operator around them is named.
_FACTORY_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::resize_",
    }
)


@dataclass
class IterationPeak:
    name: str
    allocated: int  # peak Total Allocated inside the iteration (bytes)
    reserved: int  # peak Total Reserved inside the iteration (bytes; 0 on CPU)
    ts: int  # ns, time of the allocated peak
    operator: str  # allocating operator at the peak ("" unknown)


@dataclass
class OperatorAllocations:
    name: str
    count: int  # allocations made inside this operator
    bytes: int  # bytes those allocations asked for


@dataclass
class DeviceMemory:
    """Memory of one device of one rank, as recorded."""

    rank: int
    device_type: int
    device_id: int
    records: int
    peak_allocated: int
    peak_reserved: int
    peak_ts: int  # ns, when Total Allocated peaked (first time)
    peak_operator: str  # allocating operator at the peak
    peak_path: list[str]  # enclosing operators at the peak, innermost first
    iterations: list[IterationPeak] = field(default_factory=list)
    top_operators: list[OperatorAllocations] = field(default_factory=list)

    @property
    def label(self) -> str:
        return device_label(self.device_type, self.device_id)

    @property
    def peak_bytes(self) -> int:
        """The figure to hold against a device's capacity: reserved where the allocator caches."""
        return max(self.peak_reserved, self.peak_allocated)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "device": self.label,
            "records": self.records,
            "peak_allocated_bytes": self.peak_allocated,
            "peak_reserved_bytes": self.peak_reserved,
            "peak_us": self.peak_ts / 1000,
            "peak_operator": self.peak_operator,
            "peak_path": self.peak_path,
            "iterations": [
                {
                    "name": it.name,
                    "peak_allocated_bytes": it.allocated,
                    "peak_reserved_bytes": it.reserved,
                    "peak_us": it.ts / 1000,
                    "operator": it.operator,
                }
                for it in self.iterations
            ],
            "top_operators": [
                {"name": o.name, "allocations": o.count, "bytes": o.bytes} for o in self.top_operators
            ],
        }


def job_has_memory(job: Job) -> bool:
    return any(len(t.memory) for t in job.ranks)


def allocating_ops(rank: RankTrace, rows: np.ndarray | None = None) -> np.ndarray:
    """Event index of the allocating operator of each record (``rows``: a subset), -1 unknown."""
    op = rank.memory.op if rows is None else rank.memory.op[rows]
    if not len(op):
        return op.copy()
    factory = rank.names_matching(lambda s: s in _FACTORY_OPS)
    cur = op.astype(np.int32).copy()
    for _ in range(64):
        valid = cur >= 0
        is_factory = np.zeros(len(cur), bool)
        is_factory[valid] = factory[rank.name[cur[valid]]]
        if not is_factory.any():
            break
        parents = rank.parent[np.maximum(cur, 0)]
        # A factory op at top level has no better name: keep it.
        step = is_factory & (parents >= 0)
        if not step.any():
            break
        cur = np.where(step, parents, cur)
    return cur


def _path(rank: RankTrace, event: int) -> list[str]:
    out = []
    while event >= 0 and len(out) < 32:
        out.append(rank.name_of(event))
        event = int(rank.parent[event])
    return out


def rank_memory(rank: RankTrace, top: int = 10) -> list[DeviceMemory]:
    """One :class:`DeviceMemory` per device with records (CUDA first); empty without records."""
    m = rank.memory
    out = []
    for dtype, did in m.devices():
        rows = m.of_device(dtype, did)
        alloc = m.allocated[rows]
        reserved = m.reserved[rows]
        ops = allocating_ops(rank, rows)
        k = int(np.argmax(alloc))
        peak_op = int(ops[k])
        dm = DeviceMemory(
            rank=rank.rank,
            device_type=dtype,
            device_id=did,
            records=len(rows),
            peak_allocated=int(alloc[k]),
            peak_reserved=int(reserved.max()),
            peak_ts=int(m.ts[rows[k]]),
            peak_operator=rank.name_of(peak_op) if peak_op >= 0 else "",
            peak_path=_path(rank, int(m.op[rows[k]])),
        )
        ts = m.ts[rows]
        for it in rank.iterations:
            a, b = np.searchsorted(ts, [it.cpu_start, it.cpu_end], side="left")
            b = np.searchsorted(ts, it.cpu_end, side="right")
            if b <= a:
                continue
            j = a + int(np.argmax(alloc[a:b]))
            op = int(ops[j])
            dm.iterations.append(
                IterationPeak(
                    name=it.name,
                    allocated=int(alloc[j]),
                    reserved=int(reserved[a:b].max()),
                    ts=int(ts[j]),
                    operator=rank.name_of(op) if op >= 0 else "",
                )
            )
        grow = m.delta[rows] > 0
        named = grow & (ops >= 0)
        if named.any():
            names = rank.name[ops[named]]
            count = np.bincount(names, minlength=len(rank.strings))
            size = np.bincount(
                names, weights=m.delta[rows][named].astype(np.float64), minlength=len(rank.strings)
            )
            best = np.argsort(-size, kind="stable")[:top]
            dm.top_operators = [
                OperatorAllocations(rank.strings[i], int(count[i]), int(size[i]))
                for i in best.tolist()
                if count[i]
            ]
        out.append(dm)
    return out


def measured_peaks(job: Job) -> dict[int, DeviceMemory]:
    """Per rank, the device whose peak matters: the GPU where there is one, else the CPU."""
    out: dict[int, DeviceMemory] = {}
    for t in job.ranks:
        devs = rank_memory(t, top=0)
        gpu = [d for d in devs if d.device_type == DEVICE_CUDA]
        cpu = [d for d in devs if d.device_type == DEVICE_CPU]
        pick = max(gpu, key=lambda d: d.peak_bytes) if gpu else (cpu[0] if cpu else None)
        if pick is not None:
            out[t.rank] = pick
    return out


def memory_report(job: Job, top: int = 10) -> dict[str, Any]:
    """JSON-friendly memory section for ``lumos inspect`` and the app's Summary pane."""
    devices = [d for t in job.ranks for d in rank_memory(t, top)]
    if not devices:
        return {"recorded": False, "note": NO_MEMORY_HINT, "devices": []}
    notes = []
    if any(d.device_type == DEVICE_CPU for d in devices):
        notes.append(
            "CPU records count only tensors allocated while the profiler recorded memory; tensors "
            "made before it started (e.g. weights of a warmed-up run) are not in the totals"
        )
    return {"recorded": True, "notes": notes, "devices": [d.as_dict() for d in devices]}


def format_memory_report(report: dict[str, Any]) -> list[str]:
    """Text lines of :func:`memory_report` (for ``lumos inspect``)."""
    if not report["recorded"]:
        return [f"memory: {report['note']}"]
    lines = ["memory (from the profiler's [memory] records):"]
    for d in report["devices"]:
        reserved = d["peak_reserved_bytes"]
        lines.append(
            f"  rank {d['rank']} {d['device']}: peak allocated {format_bytes(d['peak_allocated_bytes'])}"
            + (f", reserved {format_bytes(reserved)}" if reserved else "")
            + f" at {d['peak_us'] / 1000:.3f} ms in {d['peak_operator'] or '?'}"
            + f" ({d['records']} records)"
        )
        for it in d["iterations"]:
            lines.append(
                f"    {it['name']:<18} peak {format_bytes(it['peak_allocated_bytes'])} in {it['operator'] or '?'}"
            )
        if d["top_operators"]:
            lines.append("    top allocating operators: " + ", ".join(
                f"{o['name']} {format_bytes(o['bytes'])} ({o['allocations']}x)" for o in d["top_operators"][:5]
            ))  # fmt: skip
    lines.extend(f"  note: {n}" for n in report.get("notes", []))
    return lines


def format_bytes(b: float) -> str:
    """Bytes in the largest binary unit they reach: "1.50 GiB", "125.6 MiB", "3.0 KiB"."""
    if abs(b) >= 2**30:
        return f"{b / 2**30:,.2f} GiB"
    if abs(b) >= 2**20:
        return f"{b / 2**20:,.1f} MiB"
    return f"{b / 2**10:,.1f} KiB"
