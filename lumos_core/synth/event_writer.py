"""Event dicts of one synthetic rank at the level of Kineto fields (what :class:`.emit.Emitter` writes with)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# CUDA stream ids per stream index (compute, TP, DP, previous stage, next stage, CP send, CP receive).
STREAM_IDS = (7, 20, 24, 28, 32, 36, 40)

CBID_LAUNCH = 211
CBID_NCCL_LAUNCH = 652
CBID_EVENT_RECORD = 135
CBID_STREAM_WAIT = 147
CBID_MEMCPY = 41
CBID_STREAM_SYNC = 131


@dataclass
class RankIdentity:
    """Process/thread ids and process-group facts of one rank, for event fields and args."""

    rank: int
    pid: int
    tids: tuple[int, int]  # main, autograd
    device: int
    shift_ns: int  # added to true ns before writing
    groups: tuple[tuple[str, str, int, str], ...]
    # (name, desc, size, ranks text) of the TP, DP (DP x CP with context parallelism), PP and CP groups
    first_step: int


class EventWriter:
    """The event dicts of one rank: ids, times, CPU ranges, runtime calls, GPU activities and the
    event record/wait pairs; each iteration's list goes to ``sink``."""

    def __init__(self, ident: RankIdentity, sink: Callable[[list[dict[str, Any]]], None]) -> None:
        self.id = ident
        self.sink = sink
        self.ev: list[dict[str, Any]] = []
        self._ext = 0
        self._corr = 0
        self._event_id = 0
        self.n_events = 0
        self.n_gpu = 0

    # ---- ids and time ----
    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def us(self, t: int) -> float:
        return (t + self.id.shift_ns) / 1000.0

    # ---- building blocks ----
    def complete(
        self, cat: str, name: str, pid: int, tid: int, t0: int, t1: int, args: dict[str, Any]
    ) -> None:
        self.ev.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": self.us(t0),
                "dur": (t1 - t0) / 1000.0,
                "args": args,
            }
        )

    def runtime(
        self, th: int, name: str, t0: int, t1: int, ext: int, cbid: int, cat: str = "cuda_runtime"
    ) -> int:
        corr = self._next_corr()
        self.complete(
            cat,
            name,
            self.id.pid,
            self.id.tids[th],
            t0,
            t1,
            {"External id": ext, "cbid": cbid, "correlation": corr},
        )
        return corr

    def gpu_activity(
        self,
        cat: str,
        name: str,
        stream: int,
        t0: int,
        t1: int,
        args: dict[str, Any],
        th: int,
        launch_t0: int,
        corr: int,
    ) -> None:
        sid = STREAM_IDS[stream]
        self.complete(cat, name, self.id.device, sid, t0, t1, args)
        self.ev.append(
            {
                "ph": "s",
                "id": corr,
                "pid": self.id.pid,
                "tid": self.id.tids[th],
                "ts": self.us(launch_t0),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.ev.append(
            {
                "ph": "f",
                "id": corr,
                "pid": self.id.device,
                "tid": sid,
                "ts": self.us(t0),
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
        self.n_gpu += 1

    def gpu_args(self, stream: int, ext: int, corr: int) -> dict[str, Any]:
        return {
            "External id": ext,
            "queued": 0,
            "device": self.id.device,
            "context": 1,
            "stream": STREAM_IDS[stream],
            "correlation": corr,
        }

    def wait_event(
        self, th: int, ext: int, waiting: int, on: int, record_corr: int, event_id: int, t0: int, t1: int
    ) -> None:
        corr = self.runtime(th, "cudaStreamWaitEvent", t0, t1, ext, CBID_STREAM_WAIT)
        mid = t0 + (t1 - t0) // 4
        self.complete(
            "cuda_sync",
            "Stream Wait Event",
            self.id.device,
            STREAM_IDS[waiting],
            mid,
            mid + max(1, (t1 - t0) // 2),
            {
                "External id": ext,
                "cuda_sync_kind": "Stream Wait Event",
                "wait_on_stream": STREAM_IDS[on],
                "wait_on_cuda_event_record_corr_id": record_corr,
                "wait_on_cuda_event_id": event_id,
                "stream": STREAM_IDS[waiting],
                "correlation": corr,
                "device": self.id.device,
                "context": 1,
            },
        )

    def record_event(self, th: int, ext: int, t0: int, t1: int) -> tuple[int, int]:
        corr = self.runtime(th, "cudaEventRecord", t0, t1, ext, CBID_EVENT_RECORD)
        self._event_id += 1
        return corr, self._event_id

    def flush(self) -> None:
        self.n_events += len(self.ev)
        self.sink(self.ev)
        self.ev = []
