"""Writing one stage's plan: instructions, and kernel and communication descriptors shared by
every use (a 96-layer stage reuses one set)."""

from __future__ import annotations

from lumos_core.perf import costs
from lumos_core.perf.hardware import GpuProfile
from lumos_core.synth.kernel_names import GEMM_NAMES
from lumos_core.synth.models import SynthConfig
from lumos_core.synth.plan import (
    BF16,
    OP_BEGIN,
    OP_COLL,
    OP_END,
    OP_KERNEL,
    OP_WAIT,
    ROLE_TP,
    CommDesc,
    KernelDesc,
    StagePlan,
)
from lumos_core.trace.model import CollectiveKind


def ns(seconds: float) -> int:
    return max(1, round(seconds * 1e9))


class StageWriter:
    """Appends instructions and deduplicated kernel/communication descriptors to one stage's plan."""

    def __init__(self, cfg: SynthConfig, gpu: GpuProfile, stage: int) -> None:
        self.cfg = cfg
        self.gpu = gpu
        self.plan = StagePlan(stage)
        self.ops = self.plan.ops
        m = cfg.model
        self.T = cfg.tokens
        self.h = m.hidden
        self.f_tp = m.ffn // cfg.tp
        self.v_tp = m.vocab // cfg.tp
        self.heads_tp = m.heads // cfg.tp
        self.a_tp = m.attn_dim // cfg.tp  # this rank's share of Q/attention-output width
        self.qkv_tp = m.qkv_dim // cfg.tp  # ... of the fused QKV output (GQA: fewer K/V heads)
        self.fin_tp = m.ffn_in_dim // cfg.tp  # ... of the first MLP GEMM (SwiGLU: gate and up)
        # Sequence parallelism keeps norms, residuals and dropout on T / tp rows.
        self.T_sp = self.T // cfg.tp if cfg.sp and cfg.tp > 1 else self.T
        self.gemm_pattern = GEMM_NAMES.get(gpu.compute_capability[0], GEMM_NAMES[9])
        # Volta has no BF16: Megatron trains in FP16 there, so kernels and messages say Half.
        self.fp16 = gpu.compute_capability[0] < 8
        self._kernel_index: dict[tuple, int] = {}
        self._comm_index: dict[tuple, int] = {}

    # ---- descriptor tables (deduplicated: a 96-layer stage reuses one set) ----
    def _kernel(self, desc: KernelDesc) -> int:
        if self.fp16:
            desc.kernel_name = desc.kernel_name.replace("c10::BFloat16", "c10::Half").replace(
                "cutlass::bfloat16_t", "cutlass::half_t"
            )
            if desc.types:
                desc.types = [t.replace("c10::BFloat16", "c10::Half") for t in desc.types]
        key = (desc.cpu_name, desc.kernel_name, desc.gpu_ns, repr(desc.dims))
        idx = self._kernel_index.get(key)
        if idx is None:
            idx = self._kernel_index[key] = len(self.plan.kernels)
            self.plan.kernels.append(desc)
        return idx

    def comm_index(self, desc: CommDesc) -> int:
        if self.fp16 and desc.dtype == "BFloat16":
            desc.dtype = "Half"
        key = (
            desc.role,
            desc.kind,
            desc.coll_name,
            desc.in_nelems,
            desc.out_nelems,
            desc.dtype,
            desc.reduce_op,
            desc.payload,
        )
        idx = self._comm_index.get(key)
        if idx is None:
            idx = self._comm_index[key] = len(self.plan.comms)
            self.plan.comms.append(desc)
        return idx

    def new_handle(self) -> int:
        """A handle for a collective waited later (:meth:`wait`)."""
        self.plan.n_handles += 1
        return self.plan.n_handles - 1

    # ---- instruction helpers ----
    def begin(self, thread: int, name: str, cat: str = "user_annotation") -> None:
        self.ops.append((OP_BEGIN, thread, name, cat))

    def end(self, thread: int) -> None:
        self.ops.append((OP_END, thread))

    def kernel(self, thread: int, desc: KernelDesc) -> None:
        if self.gpu.host_scale != 1.0:  # the system's host/framework speed (a fitted prior)
            desc.cpu_ns = round(desc.cpu_ns * self.gpu.host_scale)
        self.ops.append((OP_KERNEL, thread, self._kernel(desc)))

    def gemm(self, thread: int, m: int, n: int, k: int, op: str = "tn") -> None:
        t = costs.gemm_time(m, n, k, self.gpu)
        self.kernel(
            thread,
            KernelDesc(
                "aten::mm",
                self.gemm_pattern.format(op=op),
                ns(t),
                9_000,
                dims=[[m, k], [k, n]],
                types=["c10::BFloat16", "c10::BFloat16"],
                grid=(max(1, n // 256), max(1, m // 128), 1),
                block=(384, 1, 1),
                registers=168,
                shared_memory=213_000,
            ),
        )

    def elementwise(
        self,
        thread: int,
        cpu_name: str,
        kernel_name: str,
        n: int,
        reads: int = 1,
        writes: int = 1,
        dtype_bytes: int = 2,
        dims: list[list[int]] | None = None,
    ) -> None:
        t = costs.elementwise_time(n, self.gpu, reads=reads, writes=writes, dtype_bytes=dtype_bytes)
        self.kernel(
            thread,
            KernelDesc(
                cpu_name,
                kernel_name,
                ns(t),
                6_000,
                dims=dims,
                grid=(max(1, min(n // 512, 65535)), 1, 1),
                block=(128, 1, 1),
                registers=26,
            ),
        )

    def tp_allreduce(
        self, thread: int, nelems: int, dtype: tuple[str, int] = BF16, op: str = "Sum", handle: int = -1
    ) -> None:
        if self.cfg.tp == 1:
            return
        desc = CommDesc(
            ROLE_TP,
            CollectiveKind.ALL_REDUCE,
            "allreduce",
            "nccl:all_reduce",
            nelems,
            nelems,
            dtype[0],
            dtype[1],
            reduce_op=op,
        )
        self.ops.append((OP_COLL, thread, self.comm_index(desc), handle))

    def tp_exchange(self, thread: int, nelems: int, gather: bool, handle: int = -1) -> None:
        """Sequence parallelism's TP collectives on a T x h activation of ``nelems`` elements: an
        all-gather of the T/tp-row shards (before a column-parallel GEMM) or a reduce-scatter of
        the partial sums (after a row-parallel one)."""
        if self.cfg.tp == 1:
            return
        tp = self.cfg.tp
        if gather:
            desc = CommDesc(
                ROLE_TP,
                CollectiveKind.ALL_GATHER,
                "_allgather_base",
                "nccl:_all_gather_base",
                nelems // tp,
                nelems,
                *BF16,
            )
        else:
            desc = CommDesc(
                ROLE_TP,
                CollectiveKind.REDUCE_SCATTER,
                "_reduce_scatter_base",
                "nccl:_reduce_scatter_base",
                nelems,
                nelems // tp,
                *BF16,
            )
        self.ops.append((OP_COLL, thread, self.comm_index(desc), handle))

    def tp_output(self, thread: int, nelems: int) -> None:
        """After a row-parallel GEMM: all-reduce, or reduce-scatter with sequence parallelism."""
        if self.cfg.sp:
            self.tp_exchange(thread, nelems, gather=False)
        else:
            self.tp_allreduce(thread, nelems)

    def tp_input(self, thread: int, nelems: int) -> None:
        """Before a column-parallel GEMM: sequence parallelism all-gathers the sharded input."""
        if self.cfg.sp:
            self.tp_exchange(thread, nelems, gather=True)

    def collective(self, thread: int, desc: CommDesc, handle: int = -1) -> None:
        """Issue one collective (``handle`` -1: waited at once; else waited later by ``wait``)."""
        self.ops.append((OP_COLL, thread, self.comm_index(desc), handle))

    def wait(self, thread: int, handles: list[int]) -> None:
        if handles:
            self.ops.append((OP_WAIT, thread, tuple(handles)))
