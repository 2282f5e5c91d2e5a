"""Where a collective's ranks sit: how many nodes a group spans and how many of its ranks share one.

NCCL's cost depends on the shape of the group more than on its size: ranks on one node talk over
NVLink/NVSwitch, ranks on different nodes over the NICs, and a group with one rank per node (a
data-parallel group of a job with tensor parallelism 8, say) has a single NIC per node to share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["GroupShape", "shape_of_ranks", "shape_of_strided_group"]


@dataclass(frozen=True, slots=True)
class GroupShape:
    """``ranks`` GPUs on ``nodes`` nodes, ``per_node`` of them on each (the largest count)."""

    ranks: int
    nodes: int
    per_node: int

    @property
    def inter_node(self) -> bool:
        return self.nodes > 1

    @classmethod
    def single_node(cls, ranks: int) -> GroupShape:
        return cls(max(ranks, 1), 1, max(ranks, 1))

    @classmethod
    def spread(cls, ranks: int, gpus_per_node: int) -> GroupShape:
        """Consecutive ranks packed ``gpus_per_node`` to a node (the usual launcher order)."""
        ranks = max(ranks, 1)
        per_node = max(1, min(ranks, gpus_per_node))
        return cls(ranks, math.ceil(ranks / per_node), per_node)


def shape_of_ranks(ranks: Iterable[int], gpus_per_node: int) -> GroupShape:
    """The shape of a group of global ranks, node = rank // gpus_per_node."""
    ranks = list(ranks)
    if not ranks:
        return GroupShape(1, 1, 1)
    per: dict[int, int] = {}
    for r in ranks:
        per[r // max(gpus_per_node, 1)] = per.get(r // max(gpus_per_node, 1), 0) + 1
    return GroupShape(len(ranks), len(per), max(per.values()))


def shape_of_strided_group(size: int, stride: int, gpus_per_node: int) -> GroupShape:
    """``size`` ranks spaced ``stride`` apart starting at rank 0 (Megatron's TP/DP/PP order:
    TP groups are consecutive, DP groups stride TP, PP groups stride TP x DP)."""
    return shape_of_ranks(range(0, max(size, 1) * max(stride, 1), max(stride, 1)), gpus_per_node)
