"""Process groups of a synthetic Megatron job, named as PyTorch names them.

PyTorch gives process groups consecutive names ("0" is the default group) in creation order, and
every rank creates every group, so names agree across ranks. Megatron creates the data-parallel
groups, then the tensor-parallel, then the pipeline groups; this module numbers them the same way
by formula, so a 2048-rank layout costs nothing until a rank's groups are asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumos_core.synth.models import SynthConfig

__all__ = ["Layout", "ProcessGroup"]

DESC_DEFAULT = "default_pg"
DESC_DP = "DATA_PARALLEL_GROUP"
DESC_TP = "TENSOR_MODEL_PARALLEL_GROUP"
DESC_PP = "PIPELINE_MODEL_PARALLEL_GROUP"


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    index: int
    desc: str
    ranks: tuple[int, ...]

    @property
    def name(self) -> str:
        return str(self.index)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def ranks_text(self) -> str:
        """The group's ranks as PyTorch prints them in ``Process Group Ranks``: "[0, 1]"."""
        return "[" + ", ".join(map(str, self.ranks)) + "]"

    def config(self) -> dict[str, object]:
        """This group's entry of ``distributedInfo.pg_config``."""
        return {
            "pg_name": self.name,
            "pg_desc": self.desc,
            "backend_config": "cuda:nccl",
            "pg_size": self.size,
            "ranks": list(self.ranks),
        }


class Layout:
    """Rank coordinates, groups and pipeline peers of a :class:`SynthConfig`."""

    def __init__(self, cfg: SynthConfig, gpus_per_node: int = 8) -> None:
        self.cfg = cfg
        self.gpus_per_node = gpus_per_node
        self._dp_base = 1
        self._tp_base = self._dp_base + cfg.pp * cfg.tp
        self._pp_base = self._tp_base + cfg.pp * cfg.dp
        self.n_groups = self._pp_base + cfg.dp * cfg.tp

    def default_group(self) -> ProcessGroup:
        return ProcessGroup(0, DESC_DEFAULT, tuple(range(self.cfg.world_size)))

    def dp_group(self, rank: int) -> ProcessGroup:
        c = self.cfg
        stage, _, t = c.coords(rank)
        return ProcessGroup(
            self._dp_base + stage * c.tp + t, DESC_DP, tuple(c.rank_of(stage, d, t) for d in range(c.dp))
        )

    def tp_group(self, rank: int) -> ProcessGroup:
        c = self.cfg
        stage, d, _ = c.coords(rank)
        return ProcessGroup(
            self._tp_base + stage * c.dp + d, DESC_TP, tuple(c.rank_of(stage, d, t) for t in range(c.tp))
        )

    def pp_group(self, rank: int) -> ProcessGroup:
        c = self.cfg
        _, d, t = c.coords(rank)
        return ProcessGroup(
            self._pp_base + d * c.tp + t, DESC_PP, tuple(c.rank_of(s, d, t) for s in range(c.pp))
        )

    def groups_of(self, rank: int) -> list[ProcessGroup]:
        """The groups ``rank`` belongs to, in creation order (what its ``pg_config`` lists)."""
        return [self.default_group(), self.dp_group(rank), self.tp_group(rank), self.pp_group(rank)]

    def peer(self, rank: int, direction: str) -> int:
        """The rank of the previous or next pipeline stage in ``rank``'s pipeline (-1 if none)."""
        c = self.cfg
        stage, d, t = c.coords(rank)
        other = stage - 1 if direction == "prev" else stage + 1
        return c.rank_of(other, d, t) if 0 <= other < c.pp else -1

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.gpus_per_node

    def spans_nodes(self, ranks: tuple[int, ...]) -> bool:
        return len({r // self.gpus_per_node for r in ranks}) > 1
