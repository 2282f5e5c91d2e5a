"""What every re-timing rule reads, computed once per estimate: the job and its graph, the traced
and the new configuration with their GPU profiles resolved, the collective model calibrated on the
trace, and the ratios the shape rules share; and the notes the rules leave for the user."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from lumos_core.graph.model import ExecutionGraph, NodeType
from lumos_core.perf.hardware import GpuProfile
from lumos_core.perf.nccl import NcclModel
from lumos_core.perf.profile import HardwareProfile
from lumos_core.trace.model import Job, Kind, RankTrace
from lumos_core.whatif.config import Baseline, JobConfig
from lumos_core.whatif.retime.families import family_of_nodes
from lumos_core.whatif.retime.phases import NodeLabels, label_nodes
from lumos_core.whatif.retime.rank_nodes import nodes_by_rank
from lumos_core.whatif.retime.ratios import safe_ratio, width_map


@dataclass
class RetimeContext:
    """The inputs of the re-timing rules (:data:`~lumos_core.whatif.retime.rules.RULES`) for one
    configuration change; build it with :meth:`make`. The rules append what the user should know to
    ``notes``."""

    job: Job
    graph: ExecutionGraph
    baseline: Baseline
    config: JobConfig
    model: NcclModel  # the collective model, calibrated on the trace's collectives
    profile: HardwareProfile | None  # fitted on the cluster's runs (lumos calibrate), if given
    gpu_old: GpuProfile  # the traced GPU
    gpu_new: GpuProfile  # the new GPU, with the configuration's link overrides
    ranks: dict[int, RankTrace]
    by_rank: dict[int, np.ndarray]  # graph nodes per rank
    has_gpu: bool  # the trace has kernels (else its CPU operators are the work)
    task: np.ndarray  # per node: the work the compute rules re-time (collective transfers excluded)
    tok_ratio: float  # tokens per microbatch, new / traced
    h_ratio: float  # hidden size, new / traced
    sizes: dict[int, int]  # traced width -> new width, at the traced TP (ratios.width_map)
    fam: np.ndarray  # per node: its kernel family (empty when no compute rule needs it)
    notes: list[str] = field(default_factory=list)
    _labels: tuple[NodeLabels | None, str] | None = None

    def families(self) -> np.ndarray:
        """:attr:`fam`, computed on first use by a rule that needs it."""
        if len(self.fam) != self.graph.n_nodes:
            self.fam = family_of_nodes(self.graph, self.ranks, self.by_rank)
        return self.fam

    def labels(self) -> NodeLabels | None:
        """Each node's phase, layer, microbatch and iteration (:mod:`.phases`), computed once; None
        (with a note) when the layers cannot be found."""
        if self._labels is None:
            self._labels = label_nodes(self.graph, self.ranks)
            if self._labels[0] is None:
                self.notes.append(f"layer-level rules skipped: {self._labels[1]}")
        return self._labels[0]

    @property
    def base(self) -> JobConfig:
        return self.baseline.config

    @property
    def shape_change(self) -> bool:
        """Whether the work of a GPU kernel (or CPU operator) changes: tokens, widths or TP."""
        return self.tok_ratio != 1.0 or bool(self.sizes) or self.config.tp != self.base.tp

    @classmethod
    def make(
        cls,
        job: Job,
        graph: ExecutionGraph,
        baseline: Baseline,
        config: JobConfig,
        model: NcclModel,
        profile: HardwareProfile | None = None,
    ) -> RetimeContext:
        base = baseline.config
        gpu_old, gpu_new = base.gpu_profile, config.hardware
        ranks = {t.rank: t for t in job.ranks}
        by_rank = nodes_by_rank(graph)
        has_gpu = any(np.isin(t.kind, [Kind.KERNEL]).any() for t in job.ranks)
        task = (graph.node_type == NodeType.GPU) if has_gpu else (graph.node_type == NodeType.CPU)
        task &= graph.arrive_of < 0  # collective transfers are re-timed by the communication model
        # Widths a hidden/FFN change moves, at the trace's TP (sharded widths included); the TP split
        # itself divides every layer GEMM's work (Megatron splits QKV/FFN columns and the projection
        # rows, and the LM head by vocabulary).
        sizes = width_map(base, dataclasses.replace(config, tp=base.tp))
        ctx = cls(
            job=job,
            graph=graph,
            baseline=baseline,
            config=config,
            model=model,
            profile=profile,
            gpu_old=gpu_old,
            gpu_new=gpu_new,
            ranks=ranks,
            by_rank=by_rank,
            has_gpu=has_gpu,
            task=task,
            tok_ratio=safe_ratio(config.seq, base.seq) * safe_ratio(config.micro_batch, base.micro_batch),
            h_ratio=safe_ratio(config.hidden, base.hidden),
            sizes=sizes,
            fam=np.zeros(0, np.int16),
        )
        # kernel families decide the compute rules only (collectives and host time do without them)
        needs_fam = has_gpu and (
            ctx.shape_change or (base.tp == 1 and config.tp > 1) or gpu_new.name != gpu_old.name
        )
        if needs_fam:
            ctx.fam = family_of_nodes(graph, ranks, by_rank)
        return ctx
