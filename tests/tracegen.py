"""Build tiny Kineto traces by hand for tests: each event where we want it, nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class TraceBuilder:
    """Events of one rank. Times in µs. ``pid`` 100 is the process, GPU events use pid 0."""

    def __init__(self, rank: int | None = 0, world: int | None = None, pid: int = 100) -> None:
        self.rank = rank
        self.world = world
        self.pid = pid
        self.events: list[dict[str, Any]] = []
        self._corr = 1000

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def cpu(
        self, name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", args: dict | None = None
    ) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": args or {},
            }
        )

    def step(self, n: int, ts: float, dur: float, tid: int = 1) -> None:
        self.cpu(f"ProfilerStep#{n}", ts, dur, tid=tid, cat="user_annotation")

    def runtime(self, name: str, ts: float, dur: float, tid: int = 1) -> int:
        corr = self._next_corr()
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": corr, "cbid": 1},
            }
        )
        return corr

    def launch(
        self,
        kernel: str,
        ts: float,
        dur: float,
        kts: float,
        kdur: float,
        stream: int = 7,
        tid: int = 1,
        kargs: dict | None = None,
        call: str = "cudaLaunchKernel",
        cat: str = "kernel",
    ) -> int:
        corr = self.runtime(call, ts, dur, tid=tid)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": kernel,
                "pid": 0,
                "tid": stream,
                "ts": kts,
                "dur": kdur,
                "args": {"device": 0, "stream": stream, "correlation": corr, **(kargs or {})},
            }
        )
        return corr

    def graph_launch(
        self, ts: float, dur: float, kernels: list[tuple[str, float, float, int]], tid: int = 1
    ) -> int:
        """One ``cudaGraphLaunch`` releasing ``kernels`` = [(name, ts, dur, stream)]: every kernel
        carries the launch's correlation id, as CUPTI records a graph's kernels."""
        corr = self.runtime("cudaGraphLaunch", ts, dur, tid=tid)
        for name, kts, kdur, stream in kernels:
            self.events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": kts,
                    "dur": kdur,
                    "args": {"device": 0, "stream": stream, "correlation": corr, "graph node id": 1},
                }
            )
        return corr

    def sync_event(self, kind: str, ts: float, stream: int, corr: int, **extra: Any) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": kind,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "dur": 1,
                "args": {"cuda_sync_kind": kind, "stream": stream, "correlation": corr, "device": 0, **extra},
            }
        )

    def doc(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schemaVersion": 1,
            "traceEvents": list(self.events),
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
        }
        if self.rank is not None:
            info: dict[str, Any] = {"backend": "nccl", "rank": self.rank}
            if self.world:
                info["world_size"] = self.world
            d["distributedInfo"] = info
        return d

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.doc()))
        return path


def nccl_args(
    name: str = "allreduce", nelems: int = 1 << 20, seq: int | None = None, size: int = 2, pg: str = "0"
) -> dict[str, Any]:
    a: dict[str, Any] = {
        "Collective name": name,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "dtype": "Float",
        "Group size": size,
        "Process Group Name": pg,
        "Process Group Ranks": str(list(range(size))),
    }
    if seq is not None:
        a["Seq"] = seq
    return a
