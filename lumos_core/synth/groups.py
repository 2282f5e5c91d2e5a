"""Process groups of a synthetic Megatron job (see :mod:`lumos_core.trace.process_groups`) and the
pipeline and context-parallel ring peers and nodes of its ranks."""

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
        super().__init__(tp=cfg.tp, dp=cfg.dp, pp=cfg.pp, gpus_per_node=gpus_per_node, cp=cfg.cp)
        self.cfg = cfg

    def peer(self, rank: int, direction: str) -> int:
        """The rank of the previous or next pipeline stage in ``rank``'s pipeline (-1 if none).
        With virtual stages the stages form a ring: the last stage's chunk feeds stage 0's next."""
        c = self.cfg
        stage, d, t = c.coords(rank)
        other = stage - 1 if direction == "prev" else stage + 1
        if c.vp > 1 and c.pp > 1:
            other %= c.pp
        return c.rank_of(other, d, t, c.cp_index(rank)) if 0 <= other < c.pp else -1

    def cp_peer(self, rank: int, direction: str) -> int:
        """The next or previous rank of ``rank``'s context-parallel ring (-1 without CP)."""
        c = self.cfg
        if c.cp == 1:
            return -1
        stage, d, t = c.coords(rank)
        step = 1 if direction == "next" else -1
        return c.rank_of(stage, d, t, (c.cp_index(rank) + step) % c.cp)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.gpus_per_node

    def spans_nodes(self, ranks: tuple[int, ...]) -> bool:
        return costs.spans_nodes(ranks, self.gpus_per_node)
