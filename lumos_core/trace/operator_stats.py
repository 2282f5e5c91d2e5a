"""The operator view: CPU operators by self and total time, calls, and the GPU time they launched.

The table the TensorBoard profiler plugin's "Operator" view showed. Per operator name (``cpu_op``
events), over every call on every rank in scope:

* **host total**: the calls' durations; **host self**: minus the time of events nested directly
  inside them on the same thread (child operators, runtime calls);
* **GPU total**: the duration of every GPU activity launched by a runtime call anywhere inside
  the call; **GPU self**: launched by runtime calls directly inside it.

A call nested in a call of the same name (``aten::to`` inside ``aten::to``) is counted in both
totals, as the plugin did; self times never double count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lumos_core.trace.model import GPU_ACTIVITY_KINDS, Job, Kind, RankTrace

__all__ = ["OperatorStat", "operator_table"]


@dataclass(frozen=True)
class OperatorStat:
    name: str
    calls: int
    host_total_ns: int
    host_self_ns: int
    gpu_total_ns: int
    gpu_self_ns: int
    ranks: int  # ranks where the operator ran


def _rank_stats(t: RankTrace) -> dict[str, np.ndarray]:
    n = len(t)
    dur = t.dur.astype(np.float64)
    parent = t.parent.astype(np.int64)
    nested = parent >= 0
    child_time = np.bincount(parent[nested], weights=dur[nested], minlength=n)
    # GPU time per launching runtime call
    act = np.isin(t.kind, np.asarray(GPU_ACTIVITY_KINDS, np.int8)) & (t.launch >= 0)
    gpu_by_launch = np.bincount(t.launch[act].astype(np.int64), weights=dur[act], minlength=n)
    gpu_self = np.zeros(n)
    gpu_total = np.zeros(n)
    launchers = np.flatnonzero(gpu_by_launch > 0)
    if len(launchers):
        g = gpu_by_launch[launchers]
        cur = parent[launchers]
        first = cur >= 0
        np.add.at(gpu_self, cur[first], g[first])
        for _ in range(256):  # up the nesting, one level per pass
            ok = cur >= 0
            if not ok.any():
                break
            np.add.at(gpu_total, cur[ok], g[ok])
            cur = np.where(ok, parent[np.maximum(cur, 0)], -1)
    ops = np.flatnonzero(t.kind == Kind.CPU_OP)
    names = t.name[ops].astype(np.int64)
    m = len(t.strings)
    return {
        "calls": np.bincount(names, minlength=m),
        "total": np.bincount(names, weights=dur[ops], minlength=m),
        "self": np.bincount(names, weights=np.maximum(dur[ops] - child_time[ops], 0), minlength=m),
        "gpu_total": np.bincount(names, weights=gpu_total[ops], minlength=m),
        "gpu_self": np.bincount(names, weights=gpu_self[ops], minlength=m),
    }


def operator_table(job: Job, rank: int | None = None) -> list[OperatorStat]:
    """One row per CPU operator name (all ranks, or ``rank``), by host self time, longest first."""
    acc: dict[str, list[float]] = {}
    for t in job.ranks:
        if rank is not None and t.rank != rank:
            continue
        s = _rank_stats(t)
        for i in np.flatnonzero(s["calls"]).tolist():
            row = acc.setdefault(t.strings[i], [0, 0, 0, 0, 0, 0])
            row[0] += int(s["calls"][i])
            row[1] += s["total"][i]
            row[2] += s["self"][i]
            row[3] += s["gpu_total"][i]
            row[4] += s["gpu_self"][i]
            row[5] += 1
    rows = [
        OperatorStat(name, int(v[0]), int(v[1]), int(v[2]), int(v[3]), int(v[4]), int(v[5]))
        for name, v in acc.items()
    ]
    rows.sort(key=lambda r: (-r.host_self_ns, r.name))
    return rows
