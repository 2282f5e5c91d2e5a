"""What the names in Kineto traces mean: categories, launch calls, sync calls, collectives, dtypes.

Kept in one place so that every variant real traces come in (PyTorch 1.8 legacy categories, CUDA
driver launches used by Triton, ROCm ``hip*`` calls, old and new NCCL kernel names) is handled by
data, not by special cases scattered through the loader.
"""

from __future__ import annotations

import re

from lumos_core.trace.model import CollectiveKind, FlowKind, Kind, RankTrace

# Kineto category -> Kind. Legacy (PyTorch 1.8) names are capitalised.
CATEGORY_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "Operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "python_function": Kind.PYTHON_FUNCTION,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "Runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "xpu_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,  # MTIA host runtime (libkineto MTIA_RUNTIME)
    "privateuse1_runtime": Kind.RUNTIME,  # custom backends (PrivateUse1)
    "privateuse1_driver": Kind.RUNTIME,
    "mtia_ccp_events": Kind.KERNEL,  # MTIA on-device activity (libkineto aliases it CONCURRENT_KERNEL)
    "kernel": Kind.KERNEL,
    "Kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "Memset": Kind.MEMSET,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "cuda_sync": Kind.CUDA_SYNC,
}

# Which accelerator a trace was recorded on, from the categories of its events (first match wins
# in ACCELERATOR_ORDER); ROCm traces often use the CUDA category names with hip* calls, so the
# runtime call names and the device name are read too (:func:`accelerator_of`).
ACCELERATOR_CATEGORIES: dict[str, str] = {
    "mtia_ccp_events": "MTIA",
    "mtia_runtime": "MTIA",
    "mtia_insight": "MTIA",
    "hip_runtime": "ROCm",
    "xpu_runtime": "XPU",
    "xpu_driver": "XPU",
    "privateuse1_runtime": "PrivateUse1",
    "privateuse1_driver": "PrivateUse1",
    "cuda_runtime": "CUDA",
    "cuda_driver": "CUDA",
    "Runtime": "CUDA",  # PyTorch 1.8 legacy traces were CUDA only
}
ACCELERATOR_ORDER = ("MTIA", "ROCm", "XPU", "PrivateUse1", "CUDA")
_AMD_DEVICE = re.compile(r"\b(AMD|Instinct|Radeon|MI\d{3}X?)\b", re.IGNORECASE)


def accelerator_of(categories: set[str], runtime_names: set[str], device_name: str, has_device_work: bool) -> str:
    """The accelerator type of one rank: MTIA, ROCm, XPU, PrivateUse1, CUDA, GPU (device work of
    an unknown kind) or CPU (no device work and no accelerator runtime)."""
    found = {ACCELERATOR_CATEGORIES[c] for c in categories if c in ACCELERATOR_CATEGORIES}
    if any(n.startswith("hip") for n in runtime_names) or _AMD_DEVICE.search(device_name or ""):
        found.discard("CUDA")
        found.add("ROCm")
    for kind in ACCELERATOR_ORDER:
        if kind in found:
            return kind
    return "GPU" if has_device_work else "CPU"


def rank_accelerator(t: RankTrace) -> str:
    """:func:`accelerator_of` for one loaded rank (its categories, runtime calls, device name)."""
    import numpy as np

    cats = {t.strings[int(i)] for i in np.unique(t.cat)} if len(t.cat) else set()
    names = {t.strings[int(i)] for i in np.unique(t.name[t.kind == Kind.RUNTIME])}
    device = bool(np.isin(t.kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)).any())
    props = t.metadata.get("deviceProperties") or []
    dev_name = str(props[0].get("name", "")) if props and isinstance(props[0], dict) else ""
    return accelerator_of(cats, names, dev_name, device)


# Kinds that run on a GPU stream (their tid is the stream).
GPU_LANE_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.CUDA_SYNC})

# Flow categories: ac2g links a launch to its GPU activity (legacy: "async" flows named "launch").
FLOW_CATEGORY: dict[str, int] = {
    "ac2g": int(FlowKind.LAUNCH),
    "async": int(FlowKind.LAUNCH),
    "fwdbwd": int(FlowKind.FWDBWD),
}
FLOW_OTHER = int(FlowKind.OTHER)  # a plain int: read once per flow event

# Runtime calls that put work on a stream. Linking uses the correlation id, so this list is only
# used to label and count launches; a call not listed here still links if its correlation matches.
LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cudaGraphLaunch",
        "cuGraphLaunch",
        "cudaMemcpyAsync",
        "cudaMemcpy",
        "cudaMemcpy2DAsync",
        "cudaMemcpyPeerAsync",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaMemsetAsync",
        "cudaMemset",
        "cudaMemset2DAsync",
        "cuMemcpyAsync",
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuMemsetD8Async",
        "cuMemsetD32Async",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipGraphLaunch",
        "hipMemcpyAsync",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "hipMemsetAsync",
        "hipMemset",
        "hipMemcpyDtoDAsync",
        "hipMemcpyHtoDAsync",
        "hipMemcpyDtoHAsync",
        "runFunction - job_prep_and_submit_for_execution",  # MTIA (HTA's launch call for MTIA)
    }
)

# Host calls that block the CPU until GPU work is done (GPU->CPU dependencies).
STREAM_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "hipStreamSynchronize", "cuStreamSynchronize"})
DEVICE_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize"})
EVENT_SYNC_CALLS = frozenset({"cudaEventSynchronize", "hipEventSynchronize", "cuEventSynchronize"})
EVENT_QUERY_CALLS = frozenset({"cudaEventQuery", "hipEventQuery", "cuEventQuery"})
EVENT_RECORD_CALLS = frozenset(
    {
        "cudaEventRecord",
        "cudaEventRecordWithFlags",
        "hipEventRecord",
        "cuEventRecord",
        "cuEventRecordWithFlags",
    }
)
STREAM_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent", "cuStreamWaitEvent"})
# Synchronous copies: the call returns when the copy is done.
BLOCKING_COPY_CALLS = frozenset(
    {"cudaMemcpy", "hipMemcpy", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cudaMemset", "hipMemset"}
)

_COMM_KERNEL = re.compile(r"nccl|rccl", re.IGNORECASE)


def is_comm_kernel(name: str) -> bool:
    """True for NCCL/RCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``, ``rccl*``)."""
    return bool(_COMM_KERNEL.search(name))


def collective_kind(name: str) -> CollectiveKind:
    """Normalise a PyTorch collective name or an NCCL kernel name to a :class:`CollectiveKind`.

    >>> collective_kind("_reduce_scatter_base").name
    'REDUCE_SCATTER'
    >>> collective_kind("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)").name
    'ALL_GATHER'
    """
    s = name.lower().replace("_", "").replace("-", "")
    # Strip an NCCL kernel prefix so "ncclkernel..." does not mask the operation name.
    for prefix in ("nccldevkernel", "ncclkernel", "rcclkernel", "nccl:", "gloo:", "c10d::"):
        if s.startswith(prefix):
            s = s[len(prefix) :]
    if "allreduce" in s:
        return CollectiveKind.ALL_REDUCE
    if "reducescatter" in s:
        return CollectiveKind.REDUCE_SCATTER
    if "allgather" in s:
        return CollectiveKind.ALL_GATHER
    if "alltoall" in s:
        return CollectiveKind.ALL_TO_ALL
    if "broadcast" in s or s.startswith("bcast"):
        return CollectiveKind.BROADCAST
    if "sendrecv" in s:
        return CollectiveKind.SEND_RECV
    if "send" in s:
        return CollectiveKind.SEND
    if "recv" in s:
        return CollectiveKind.RECV
    if "barrier" in s:
        return CollectiveKind.BARRIER
    if "reduce" in s:
        return CollectiveKind.REDUCE
    if "gather" in s:
        return CollectiveKind.ALL_GATHER
    return CollectiveKind.UNKNOWN


_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "f32": 4,
    "fp32": 4,
    "int": 4,
    "int32": 4,
    "i32": 4,
    "u32": 4,
    "uint32": 4,
    "double": 8,
    "float64": 8,
    "f64": 8,
    "long": 8,
    "int64": 8,
    "i64": 8,
    "u64": 8,
    "uint64": 8,
    "bfloat16": 2,
    "bf16": 2,
    "half": 2,
    "float16": 2,
    "f16": 2,
    "fp16": 2,
    "short": 2,
    "int16": 2,
    "byte": 1,
    "char": 1,
    "int8": 1,
    "uint8": 1,
    "i8": 1,
    "u8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "fp8": 1,
    "e4m3": 1,
    "e5m2": 1,
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype as written in traces ("BFloat16", "c10::Half", "float"); 0 if unknown."""
    s = dtype.lower().removeprefix("c10::").removeprefix("torch.").strip()
    return _DTYPE_BYTES.get(s, 0)


_KERNEL_DTYPE = re.compile(
    r"_(bf16|f16|f32|f64|half|float|double|i8|u8|i32|u32|i64|u64|f8e4m3|f8e5m2)\b", re.IGNORECASE
)


def kernel_dtype_bytes(kernel_name: str) -> int:
    """Element size encoded in an NCCL kernel name (``..._Sum_bf16_RING_LL``), 0 if absent."""
    m = _KERNEL_DTYPE.search(kernel_name.split("(")[0])
    return dtype_bytes(m.group(1)) if m else 0


def profiler_step(name: str) -> int | None:
    """The N of ``ProfilerStep#N``, or None."""
    if name.startswith("ProfilerStep#"):
        tail = name[len("ProfilerStep#") :]
        # ASCII and short: "ProfilerStep#²" or 5000 digits would make int() raise
        if tail.isascii() and tail.isdigit() and len(tail) <= 18:
            return int(tail)
    return None
