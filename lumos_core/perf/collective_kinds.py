"""Collective kinds by name and NCCL-tests' bus factor: the conventions every collective model shares.

The bus factor is the bytes each GPU's link carries per byte of message, as NCCL-tests reports bus
bandwidth (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): all-reduce
2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1.
"""

from __future__ import annotations

from lumos_core.trace.model import CollectiveKind

__all__ = ["as_collective_kind", "bus_factor"]

_KIND_NAMES = {
    "allreduce": CollectiveKind.ALL_REDUCE,
    "all_reduce": CollectiveKind.ALL_REDUCE,
    "allgather": CollectiveKind.ALL_GATHER,
    "all_gather": CollectiveKind.ALL_GATHER,
    "_allgather_base": CollectiveKind.ALL_GATHER,
    "all_gather_into_tensor": CollectiveKind.ALL_GATHER,
    "reducescatter": CollectiveKind.REDUCE_SCATTER,
    "reduce_scatter": CollectiveKind.REDUCE_SCATTER,
    "_reduce_scatter_base": CollectiveKind.REDUCE_SCATTER,
    "reduce_scatter_tensor": CollectiveKind.REDUCE_SCATTER,
    "broadcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
    "alltoall": CollectiveKind.ALL_TO_ALL,
    "all_to_all": CollectiveKind.ALL_TO_ALL,
    "all_to_allv": CollectiveKind.ALL_TO_ALL,
    "alltoall_base": CollectiveKind.ALL_TO_ALL,
    "send": CollectiveKind.SEND,
    "recv": CollectiveKind.RECV,
    "sendrecv": CollectiveKind.SEND_RECV,
    "send_recv": CollectiveKind.SEND_RECV,
    "barrier": CollectiveKind.BARRIER,
}


def as_collective_kind(kind: CollectiveKind | str | int) -> CollectiveKind:
    """Accept a :class:`CollectiveKind`, its value, or a PyTorch/NCCL-style name ("allreduce")."""
    if isinstance(kind, CollectiveKind):
        return kind
    if isinstance(kind, int):
        return CollectiveKind(kind)
    key = kind.strip().lower().replace("-", "_").replace(" ", "_")
    if key in _KIND_NAMES:
        return _KIND_NAMES[key]
    if key.upper() in CollectiveKind.__members__:
        return CollectiveKind[key.upper()]
    return CollectiveKind.UNKNOWN


def bus_factor(kind: CollectiveKind | str, n: int) -> float:
    """NCCL-tests bus-bandwidth factor: bytes each GPU's link carries per byte of message."""
    k = as_collective_kind(kind)
    if k in (CollectiveKind.SEND, CollectiveKind.RECV, CollectiveKind.SEND_RECV):
        return 1.0
    if n <= 1:
        return 0.0
    if k in (CollectiveKind.ALL_REDUCE, CollectiveKind.UNKNOWN):
        return 2.0 * (n - 1) / n
    if k in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
        return (n - 1) / n
    if k == CollectiveKind.BARRIER:
        return 0.0
    return 1.0  # broadcast, reduce
