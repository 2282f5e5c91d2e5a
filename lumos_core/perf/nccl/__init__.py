"""Collective communication cost model after NCCL: topology, algorithms and protocols, selection."""

from lumos_core.perf.nccl.model import CollectiveSample, NcclModel, Prediction
from lumos_core.perf.nccl.params import CommParams, params_for_gpu
from lumos_core.perf.nccl.topology import GroupShape, shape_of_ranks, shape_of_strided_group

__all__ = [
    "CollectiveSample",
    "CommParams",
    "GroupShape",
    "NcclModel",
    "Prediction",
    "params_for_gpu",
    "shape_of_ranks",
    "shape_of_strided_group",
]
