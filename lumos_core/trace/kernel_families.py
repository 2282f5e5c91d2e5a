"""Group GPU activities (and CPU events) into families: GEMM, attention, elementwise/norm, NCCL, ...

Families are what a timeline colours by and what kernel summaries group by. Classification is by
name (and kind, for memcpy/memset and CPU events). Kernel names are long and repeat millions of times,
so every *unique* name is classified once (:func:`classify_names` over a rank's string table) and
events are then classified by indexing (:func:`event_families`) — vectorised, no Python per event.

The order of the rules matters: Inductor names its fused Triton kernels after every op they fuse
(``triton_poi_fused__scaled_mm_...``, ``triton_per_fused__flash_attn_backward_...``), so the
``triton_poi/red/per`` prefix wins over the op names inside; attention libraries are built on
CUTLASS (``cutlass::device_kernel<flash::...>``), so attention is tested before GEMM.
"""

from __future__ import annotations

from enum import IntEnum
from functools import lru_cache

import numpy as np

from lumos_core.trace.kineto_schema import collective_kind, is_comm_kernel
from lumos_core.trace.model import CollectiveKind, Kind, RankTrace

# CPU operators whose kernels are matrix multiplies (their Input Dims give the GEMM's shape).
GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::linear",
        "aten::matmul",
        "aten::bmm",
        "nanogpt::mm",
        "aten::_scaled_mm",
    }
)


class Family(IntEnum):
    """What kind of work an event is. The values are stable: they index colour tables."""

    GEMM = 0
    ATTENTION = 1
    ELEMENTWISE = 2  # elementwise and normalisation (layer/rms norm, softmax, fused Triton pointwise)
    REDUCTION = 3
    KERNEL_OTHER = 4
    NCCL_ALL_REDUCE = 5
    NCCL_ALL_GATHER = 6
    NCCL_REDUCE_SCATTER = 7
    NCCL_ALL_TO_ALL = 8
    NCCL_BROADCAST = 9
    NCCL_REDUCE = 10
    NCCL_P2P = 11  # send, recv, sendrecv
    NCCL_OTHER = 12
    MEMCPY = 13
    MEMSET = 14
    CPU_OP = 15
    CPU_RUNTIME = 16  # CUDA runtime/driver calls (launches, syncs)
    CPU_ANNOTATION = 17  # user annotations (ProfilerStep#N, record_function)
    CPU_PYTHON = 18
    OTHER = 19  # GPU annotations, sync markers, anything else

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def is_nccl(self) -> bool:
        return Family.NCCL_ALL_REDUCE <= self <= Family.NCCL_OTHER

    @property
    def is_gpu(self) -> bool:
        return self <= Family.MEMSET


N_FAMILIES = len(Family)

_LABELS = {
    Family.GEMM: "GEMM / conv",
    Family.ATTENTION: "attention",
    Family.ELEMENTWISE: "elementwise / norm",
    Family.REDUCTION: "reduction",
    Family.KERNEL_OTHER: "other kernel",
    Family.NCCL_ALL_REDUCE: "NCCL AllReduce",
    Family.NCCL_ALL_GATHER: "NCCL AllGather",
    Family.NCCL_REDUCE_SCATTER: "NCCL ReduceScatter",
    Family.NCCL_ALL_TO_ALL: "NCCL AllToAll",
    Family.NCCL_BROADCAST: "NCCL Broadcast",
    Family.NCCL_REDUCE: "NCCL Reduce",
    Family.NCCL_P2P: "NCCL send/recv",
    Family.NCCL_OTHER: "NCCL other",
    Family.MEMCPY: "memcpy",
    Family.MEMSET: "memset",
    Family.CPU_OP: "CPU op",
    Family.CPU_RUNTIME: "CUDA runtime",
    Family.CPU_ANNOTATION: "annotation",
    Family.CPU_PYTHON: "python",
    Family.OTHER: "other",
}

_NCCL_FAMILY = {
    CollectiveKind.ALL_REDUCE: Family.NCCL_ALL_REDUCE,
    CollectiveKind.ALL_GATHER: Family.NCCL_ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER: Family.NCCL_REDUCE_SCATTER,
    CollectiveKind.ALL_TO_ALL: Family.NCCL_ALL_TO_ALL,
    CollectiveKind.BROADCAST: Family.NCCL_BROADCAST,
    CollectiveKind.REDUCE: Family.NCCL_REDUCE,
    CollectiveKind.SEND: Family.NCCL_P2P,
    CollectiveKind.RECV: Family.NCCL_P2P,
    CollectiveKind.SEND_RECV: Family.NCCL_P2P,
}

_FUSED_TRITON = ("triton_poi", "triton_red", "triton_per")
_ATTENTION = ("flash", "fmha", "attention", "attn", "sdpa", "scaled_dot_product", "_mha", "mha_")
_GEMM = (
    "gemm",
    "gemv",
    "cutlass",
    "cublas",
    "xmma",
    "nvjet",
    "matmul",
    "wgmma",
    "cudnn",
    "conv",
    "triton_mm",
    "mm_kernel",
    "bmm_kernel",
    "_tem_fused_mm",
    "_tem_fused_addmm",
    "_tem_fused_bmm",
)
_REDUCTION = ("reduce_kernel", "reduce_1block", "reduction", "devicereduce", "devicesegmentedreduce")
_ELEMENTWISE = (
    "elementwise",
    "layer_norm",
    "layernorm",
    "rms_norm",
    "rmsnorm",
    "batch_norm",
    "batchnorm",
    "group_norm",
    "groupnorm",
    "norm_kernel",
    "softmax",
    "dropout",
    "fillfunctor",
    "fill_kernel",
    "copy_kernel",
    "catarray",
    "multi_tensor_apply",
    "adam",
    "gelu",
    "silu",
    "relu",
    "sigmoid",
    "pointwise",
    "index",
)


@lru_cache(maxsize=1 << 16)
def classify_kernel_name(name: str) -> Family:
    """Family of a GPU kernel from its name alone.

    >>> classify_kernel_name("nvjet_tst_128x128_64x6_2x4_v_bz_NTT").name
    'GEMM'
    >>> classify_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)").name
    'NCCL_ALL_GATHER'
    >>> classify_kernel_name("triton_per_fused__flash_attn_backward__unsafe_view_mul_10").name
    'ELEMENTWISE'
    """
    if is_comm_kernel(name):
        return _NCCL_FAMILY.get(collective_kind(name), Family.NCCL_OTHER)
    s = name.lower()
    if s.startswith("memcpy") or "memcpy" in s.split("(")[0]:
        return Family.MEMCPY
    if s.startswith("memset"):
        return Family.MEMSET
    if s.startswith(_FUSED_TRITON):
        return Family.ELEMENTWISE
    if any(k in s for k in _ATTENTION):
        return Family.ATTENTION
    if any(k in s for k in _GEMM):
        return Family.GEMM
    if any(k in s for k in _REDUCTION):
        return Family.REDUCTION
    if any(k in s for k in _ELEMENTWISE):
        return Family.ELEMENTWISE
    return Family.KERNEL_OTHER


def classify_names(strings: list[str]) -> np.ndarray:
    """Kernel family (int8) of every entry of a string table, as if each were a kernel name."""
    return np.fromiter((classify_kernel_name(s) for s in strings), np.int8, len(strings))


# Families that the event kind decides on its own (name ignored).
_KIND_FAMILY = np.full(max(int(k) for k in Kind) + 1, -1, np.int8)
_KIND_FAMILY[Kind.MEMCPY] = Family.MEMCPY
_KIND_FAMILY[Kind.MEMSET] = Family.MEMSET
_KIND_FAMILY[Kind.CPU_OP] = Family.CPU_OP
_KIND_FAMILY[Kind.RUNTIME] = Family.CPU_RUNTIME
_KIND_FAMILY[Kind.USER_ANNOTATION] = Family.CPU_ANNOTATION
_KIND_FAMILY[Kind.PYTHON_FUNCTION] = Family.CPU_PYTHON
_KIND_FAMILY[Kind.GPU_ANNOTATION] = Family.OTHER
_KIND_FAMILY[Kind.CUDA_SYNC] = Family.OTHER
_KIND_FAMILY[Kind.OTHER] = Family.OTHER


def event_families(rank: RankTrace) -> np.ndarray:
    """Family (int8) of every event of a rank: kernels by name, everything else by kind."""
    by_name = classify_names(rank.strings)
    fam = _KIND_FAMILY[rank.kind]
    kernels = rank.kind == Kind.KERNEL
    fam[kernels] = by_name[rank.name[kernels]]
    # A kernel on a collective row is communication even if its name hides it (e.g. a custom
    # all-reduce kernel the loader recognised from its enclosing record_param_comms op).
    coll = rank.collectives
    if len(coll):
        f = fam[coll.event]
        hidden = (f < Family.NCCL_ALL_REDUCE) | (f > Family.NCCL_OTHER)
        if hidden.any():
            kinds = coll.kind[hidden]
            fam[coll.event[hidden]] = [
                _NCCL_FAMILY.get(CollectiveKind(int(k)), Family.NCCL_OTHER) for k in kinds
            ]
    return fam


def family_labels() -> list[str]:
    """Labels indexed by family value (for tables and legends)."""
    return [f.label for f in Family]
