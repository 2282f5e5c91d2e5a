"""Process groups of a Megatron-style job, named as PyTorch names them.

PyTorch gives process groups consecutive names ("0" is the default group) in creation order, and
every rank creates every group, so names agree across ranks. Megatron creates the data-parallel
groups, then the tensor-parallel, then the pipeline groups; ranks are numbered tensor-parallel
fastest, then data-parallel, then pipeline stage. :class:`GroupLayout` numbers the groups the same
way by formula, so a 2048-rank layout costs nothing until a rank's groups are asked for. Synthetic
jobs and exported predictions both describe their groups with it (``distributedInfo.pg_config``
and the collectives' ``Process Group`` args).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DESC_CP",
    "DESC_DEFAULT",
    "DESC_DP",
    "DESC_DP_CP",
    "DESC_PP",
    "DESC_TP",
    "GroupLayout",
    "ProcessGroup",
]

DESC_DEFAULT = "default_pg"
DESC_DP = "DATA_PARALLEL_GROUP"
DESC_TP = "TENSOR_MODEL_PARALLEL_GROUP"
DESC_PP = "PIPELINE_MODEL_PARALLEL_GROUP"
DESC_CP = "CONTEXT_PARALLEL_GROUP"
DESC_DP_CP = "DATA_PARALLEL_GROUP_WITH_CP"  # Megatron reduces gradients over DP x CP


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    index: int
    desc: str
    ranks: tuple[int, ...]
    backend_config: str = "cuda:nccl"

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
            "backend_config": self.backend_config,
            "pg_size": self.size,
            "ranks": list(self.ranks),
        }


class GroupLayout:
    """Rank coordinates and process groups of a TP x CP x DP x PP job (Megatron order: TP fastest,
    then context-parallel, data-parallel, pipeline). With context parallelism the context-parallel
    groups and the combined DP x CP groups (over which Megatron reduces gradients and shards the
    optimizer) come after the others, so a job without CP numbers its groups as before."""

    def __init__(self, tp: int, dp: int, pp: int, gpus_per_node: int = 8, cp: int = 1) -> None:
        self.tp, self.dp, self.pp, self.cp = tp, dp, pp, cp
        self.gpus_per_node = gpus_per_node
        self._dp_base = 1
        self._tp_base = self._dp_base + pp * cp * tp
        self._pp_base = self._tp_base + pp * dp * cp
        self._cp_base = self._pp_base + dp * cp * tp
        self._dp_cp_base = self._cp_base + pp * dp * tp
        self.n_groups = self._cp_base if cp == 1 else self._dp_cp_base + pp * tp

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pipeline stage, data-parallel index, tensor-parallel index) of a global rank."""
        tc = self.tp * self.cp
        return rank // (tc * self.dp), (rank // tc) % self.dp, rank % self.tp

    def cp_index(self, rank: int) -> int:
        return (rank // self.tp) % self.cp

    def rank_of(self, stage: int, dp_index: int, tp_index: int, cp_index: int = 0) -> int:
        tc = self.tp * self.cp
        return stage * tc * self.dp + dp_index * tc + cp_index * self.tp + tp_index

    def default_group(self) -> ProcessGroup:
        return ProcessGroup(0, DESC_DEFAULT, tuple(range(self.world_size)))

    def dp_group(self, rank: int) -> ProcessGroup:
        stage, _, t = self.coords(rank)
        c = self.cp_index(rank)
        return ProcessGroup(
            self._dp_base + (stage * self.cp + c) * self.tp + t,
            DESC_DP,
            tuple(self.rank_of(stage, d, t, c) for d in range(self.dp)),
        )

    def tp_group(self, rank: int) -> ProcessGroup:
        stage, d, _ = self.coords(rank)
        c = self.cp_index(rank)
        return ProcessGroup(
            self._tp_base + (stage * self.dp + d) * self.cp + c,
            DESC_TP,
            tuple(self.rank_of(stage, d, t, c) for t in range(self.tp)),
        )

    def pp_group(self, rank: int) -> ProcessGroup:
        _, d, t = self.coords(rank)
        c = self.cp_index(rank)
        return ProcessGroup(
            self._pp_base + (d * self.cp + c) * self.tp + t,
            DESC_PP,
            tuple(self.rank_of(s, d, t, c) for s in range(self.pp)),
        )

    def cp_group(self, rank: int) -> ProcessGroup:
        """The ranks that split one sequence: consecutive TP groups (stride TP)."""
        stage, d, t = self.coords(rank)
        return ProcessGroup(
            self._cp_base + (stage * self.dp + d) * self.tp + t,
            DESC_CP,
            tuple(self.rank_of(stage, d, t, c) for c in range(self.cp)),
        )

    def dp_cp_group(self, rank: int) -> ProcessGroup:
        """DP x CP: the gradient reduction's group with context parallelism (the DP group without)."""
        if self.cp == 1:
            return self.dp_group(rank)
        stage, _, t = self.coords(rank)
        return ProcessGroup(
            self._dp_cp_base + stage * self.tp + t,
            DESC_DP_CP,
            tuple(self.rank_of(stage, d, t, c) for d in range(self.dp) for c in range(self.cp)),
        )

    def groups_of(self, rank: int) -> list[ProcessGroup]:
        """The groups ``rank`` belongs to, in creation order (what its ``pg_config`` lists)."""
        groups = [self.default_group(), self.dp_group(rank), self.tp_group(rank), self.pp_group(rank)]
        if self.cp > 1:
            groups += [self.cp_group(rank), self.dp_cp_group(rank)]
        return groups

    def group_of_role(self, rank: int, role: str) -> ProcessGroup:
        """``rank``'s group for a role: "tp", "dp", "pp" or anything else (the default group)."""
        return {"tp": self.tp_group, "dp": self.dp_group, "pp": self.pp_group, "cp": self.cp_group}.get(
            role, lambda _r: self.default_group()
        )(rank)
