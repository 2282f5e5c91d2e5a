"""Kineto events of one synthetic rank, shaped like PyTorch 2.x + Megatron-LM traces.

:class:`Emitter` receives times from :func:`.timeline.run_rank` (pass 2) and builds the event
dicts: ``cpu_op`` / ``user_annotation`` ranges on the main and autograd threads, ``cuda_runtime``
launches with correlation ids and ``ac2g`` flows, kernels on the compute and NCCL streams,
``record_param_comms`` with PyTorch's collective arguments (copied onto the NCCL kernels),
``cudaEventRecord`` / ``cudaStreamWaitEvent`` with ``cuda_sync`` "Stream Wait Event" events,
``cudaStreamSynchronize`` with a "Stream Sync" event, and ``ProfilerStep#N`` on CPU and GPU.

Times are ns on the job's true time line; the emitter adds the rank's clock shift and writes
microseconds with ns precision (see :mod:`.kineto_writer` for the shift convention).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lumos_core.synth.plan import ROLE_CP, ROLE_PREV, ROLE_TP, CommDesc, KernelDesc
from lumos_core.synth.rank_setup import RankSetup
from lumos_core.trace.model import CollectiveKind

__all__ = ["STREAM_IDS", "Emitter", "RankIdentity"]
from lumos_core.synth.event_writer import (
    CBID_LAUNCH,
    CBID_MEMCPY,
    CBID_NCCL_LAUNCH,
    CBID_STREAM_SYNC,
    STREAM_IDS,
    EventWriter,
    RankIdentity,
)


class Emitter:
    """Builds one rank's events from the times :func:`.timeline.run_rank` reports, with an
    :class:`EventWriter` (``w``) that hands each iteration's list to ``sink``."""

    def __init__(
        self, ident: RankIdentity, setup: RankSetup, sink: Callable[[list[dict[str, Any]]], None]
    ) -> None:
        self.w = EventWriter(ident, sink)
        self.id = ident
        self.setup = setup
        self._kernel_args: dict[int, dict[str, Any]] = {}
        self._handles: dict[int, tuple[int, int]] = {}  # handle -> (record correlation, event id)
        self._step_ext = 0
        self.step_spans: list[tuple[int, int]] = []  # GPU spans of ProfilerStep#N (true ns)

    @property
    def n_events(self) -> int:
        return self.w.n_events

    @property
    def n_gpu(self) -> int:
        return self.w.n_gpu

    def next_ext(self) -> int:
        return self.w.next_ext()

    def flush(self) -> None:
        self.w.flush()

    def compute(
        self, th: int, d: KernelDesc, t0: int, t1: int, l0: int, l1: int, start: int, end: int
    ) -> None:
        ext = self.w.next_ext()
        args: dict[str, Any] = {"External id": ext, "Record function id": 0}
        if d.dims is not None:
            args["Input Dims"] = d.dims
            args["Input type"] = d.types or []
        self.w.complete("cpu_op", d.cpu_name, self.id.pid, self.id.tids[th], t0, t1, args)
        corr = self.w.runtime(th, d.launch, l0, l1, ext, CBID_LAUNCH)
        static = self._kernel_args.get(id(d))
        if static is None:
            static = self._kernel_args[id(d)] = {
                "registers per thread": d.registers,
                "shared memory": d.shared_memory,
                "blocks per SM": round(d.grid[0] * d.grid[1] * d.grid[2] / 132, 6),
                "warps per SM": round(d.grid[0] * d.grid[1] * d.grid[2] * d.block[0] / 32 / 132, 6),
                "grid": list(d.grid),
                "block": list(d.block),
                "est. achieved occupancy %": 50,
            }
        args = self.w.gpu_args(0, ext, corr)
        args.update(static)
        self.w.gpu_activity("kernel", d.kernel_name, 0, start, end, args, th, l0, corr)

    def _comm_args(self, c: CommDesc, key: int) -> dict[str, Any]:
        role = c.role
        if role >= ROLE_PREV:  # pipeline (PP group) or context-parallel ring (CP group) transfers
            name, desc, size, ranks = self.id.groups[3 if role >= ROLE_CP else 2]
            seq = key & ((1 << 21) - 1)
        else:
            name, desc, size, ranks = self.id.groups[0 if role == ROLE_TP else 1]
            seq = key & 0xFFFFFFFF
        args: dict[str, Any] = {
            "Collective name": c.coll_name,
            "In msg nelems": c.in_nelems,
            "Out msg nelems": c.out_nelems,
            "Group size": size,
            "dtype": c.dtype,
            "In split size": "[]",
            "Out split size": "[]",
            "Global rank start": 0,
            "Global rank stride": 1,
            "Process Group Name": name,
            "Process Group Description": desc,
            "Process Group Ranks": ranks,
            "Rank": self.id.rank,
            "Seq": seq,
        }
        if role >= ROLE_PREV:
            peer = self.setup.peers[role - ROLE_PREV]
            me = self.id.rank
            src, dst = (me, peer) if c.kind == CollectiveKind.SEND else (peer, me)
            args["Src Rank"] = src
            args["Dst Rank"] = dst
        return args

    def collective(
        self,
        th: int,
        c: CommDesc,
        setup: RankSetup,
        key: int,
        s: int,
        cd: int,
        t0: int,
        t1: int,
        a0: int,
        a1: int,
        r0: int,
        r1: int,
        w0: int,
        w1: int,
        l0: int,
        l1: int,
        kstart: int,
        kend: int,
        q0: int,
        q1: int,
        x0: int,
        x1: int,
        wait: bool,
        handle: int,
    ) -> None:
        ext = self.w.next_ext()
        comm = self._comm_args(c, key)
        rpc_args: dict[str, Any] = {"External id": ext, "Record function id": 0}
        rpc_args.update(comm)
        self.w.complete("cpu_op", "record_param_comms", self.id.pid, self.id.tids[th], t0, t1, rpc_args)
        self.w.complete(
            "user_annotation",
            c.annotation,
            self.id.pid,
            self.id.tids[th],
            a0,
            a1,
            {"External id": self.w.next_ext(), "Record function id": 0},
        )
        rec_corr, rec_id = self.w.record_event(th, ext, r0, r1)
        self.w.wait_event(th, ext, s, 0, rec_corr, rec_id, w0, w1)
        corr = self.w.runtime(th, "cuLaunchKernelEx", l0, l1, ext, CBID_NCCL_LAUNCH, cat="cuda_driver")
        args = self.w.gpu_args(s, ext, corr)
        args.update(
            {
                "registers per thread": 96,
                "shared memory": 87_568,
                "blocks per SM": 0.181818,
                "warps per SM": 3.090909,
                "grid": [24, 1, 1],
                "block": [544, 1, 1],
                "est. achieved occupancy %": 0,
            }
        )
        args.update(comm)
        self.w.gpu_activity("kernel", setup.comm_kernel[cd], s, kstart, kend, args, th, l0, corr)
        end_corr, end_id = self.w.record_event(th, ext, q0, q1)
        if wait:
            self.w.wait_event(th, ext, 0, s, end_corr, end_id, x0, x1)
        elif handle >= 0:
            self._handles[handle] = (end_corr, end_id)

    def wait_handle(self, th: int, handle: int, s: int, x0: int, x1: int) -> None:
        corr, event_id = self._handles[handle]
        self.w.wait_event(th, self.w.next_ext(), 0, s, corr, event_id, x0, x1)

    def range(self, th: int, name: str, cat: str, t0: int, t1: int, ext: int) -> None:
        self.w.complete(
            cat, name, self.id.pid, self.id.tids[th], t0, t1, {"External id": ext, "Record function id": 0}
        )

    def memcpy(self, th: int, nbytes: int, t0: int, t1: int, start: int, end: int) -> None:
        ext = self.w.next_ext()
        self.w.complete(
            "cpu_op",
            "aten::_local_scalar_dense",
            self.id.pid,
            self.id.tids[th],
            t0 - 500,
            t1 + 300,
            {"External id": ext, "Record function id": 0},
        )
        corr = self.w.runtime(th, "cudaMemcpyAsync", t0, t1, ext, CBID_MEMCPY)
        args = self.w.gpu_args(0, ext, corr)
        args["bytes"] = nbytes
        args["memory bandwidth (GB/s)"] = round(nbytes / max(1, end - start), 6)
        self.w.gpu_activity("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 0, start, end, args, th, t0, corr)

    def stream_sync(self, th: int, t0: int, t1: int, s0: int, s1: int) -> None:
        ext = self.w.next_ext()
        corr = self.w.runtime(th, "cudaStreamSynchronize", t0, t1, ext, CBID_STREAM_SYNC)
        self.w.complete(
            "cuda_sync",
            "Stream Sync",
            self.id.device,
            STREAM_IDS[0],
            s0,
            s1,
            {
                "External id": ext,
                "cuda_sync_kind": "Stream Sync",
                "stream": STREAM_IDS[0],
                "correlation": corr,
                "device": self.id.device,
                "context": 1,
            },
        )

    def step_begin(self, iteration: int) -> None:
        self._step_ext = self.w.next_ext()

    def step_end(self, iteration: int, t0: int, t1: int, gpu_first: int, gpu_last: int) -> None:
        name = f"ProfilerStep#{self.id.first_step + iteration}"
        self.w.complete(
            "user_annotation",
            name,
            self.id.pid,
            self.id.tids[0],
            t0,
            t1,
            {"External id": self._step_ext, "Record function id": 0},
        )
        if gpu_first >= 0:
            self.w.complete(
                "gpu_user_annotation",
                name,
                self.id.device,
                STREAM_IDS[0],
                gpu_first,
                gpu_last,
                {"External id": self._step_ext},
            )
            self.step_spans.append((gpu_first, gpu_last))
