"""Process groups of a synthetic Megatron job (see :mod:`lumos_core.trace.process_groups`) and the
pipeline peers and nodes of its ranks."""

from __future__ import annotations

from lumos_core.perf import costs
from lumos_core.synth.models import SynthConfig
from lumos_core.trace.process_groups import (
    DESC_DEFAULT,
    DESC_DP,
    DESC_PP,
    DESC_TP,
    GroupLayout,
    ProcessGroup,
)

__all__ = ["DESC_DEFAULT", "DESC_DP", "DESC_PP", "DESC_TP", "Layout", "ProcessGroup"]


class Layout(GroupLayout):
    """Rank coordinates, groups and pipeline peers of a :class:`SynthConfig`."""

    def __init__(self, cfg: SynthConfig, gpus_per_node: int = 8) -> None:
        super().__init__(tp=cfg.tp, dp=cfg.dp, pp=cfg.pp, gpus_per_node=gpus_per_node)
        self.cfg = cfg

    def peer(self, rank: int, direction: str) -> int:
        """The rank of the previous or next pipeline stage in ``rank``'s pipeline (-1 if none).
        With virtual stages the stages form a ring: the last stage's chunk feeds stage 0's next."""
        c = self.cfg
        stage, d, t = c.coords(rank)
        other = stage - 1 if direction == "prev" else stage + 1
        if c.vp > 1 and c.pp > 1:
            other %= c.pp
        return c.rank_of(other, d, t) if 0 <= other < c.pp else -1

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.gpus_per_node

    def spans_nodes(self, ranks: tuple[int, ...]) -> bool:
        return costs.spans_nodes(ranks, self.gpus_per_node)
