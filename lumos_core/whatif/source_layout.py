"""Which traced stage ran which layer, and the global layer number and microbatch of every layer's
forward and backward on a stage's rank -- also when the pipeline was interleaved (Megatron's
virtual stages) and when the trace numbers its layers per stage or per model chunk.

Megatron-LM's layout: P stages x V model chunks (virtual stages) of L / (P V) layers each; chunk c
of stage s is model piece c P + s. A trace may name a layer by its global number
(``decoder.layers.13``), by its number within the stage (0 .. L/P - 1, chunks in order) or within
its model chunk (0 .. L/(P V) - 1: every chunk is its own module list). The layer segmentation
(:func:`~lumos_core.whatif.segments.segment_rank`) numbers the passes of each named layer in time
order; under the per-chunk numbering the k-th forward (backward) pass of a layer is the stage's
k-th forward (backward) step, whose microbatch and chunk the interleaved schedule gives
(:func:`~lumos_core.perf.schedules.interleaved_order`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from lumos_core.errors import ConfigError
from lumos_core.perf.schedules import interleaved_order
from lumos_core.whatif.segments import Phase, Segmentation


@dataclass(frozen=True)
class SourceLayout:
    """Where the trace's layers live: ``stages`` x ``chunks`` model chunks (virtual stages), chunk
    c of stage s holding the (c x stages + s)-th run of layers."""

    layers: int
    stages: int
    chunks: int = 1

    @classmethod
    def of(cls, layers: int, stages: int, chunks: int) -> SourceLayout:
        if layers % (stages * chunks):
            split = f"{stages} stages" + (f" x {chunks} virtual stages" if chunks > 1 else "")
            raise ConfigError(f"the trace's {layers} layers do not split evenly over its {split}")
        return cls(layers, stages, chunks)

    @property
    def per_chunk(self) -> int:
        return self.layers // (self.stages * self.chunks)

    def stage_of(self, layer: int) -> int:
        """The traced stage that ran ``layer`` (whose rank holds its templates)."""
        return (layer // self.per_chunk) % self.stages

    def layers_of(self, stage: int) -> list[int]:
        """The global layers of ``stage``, chunk by chunk."""
        n = self.per_chunk
        return [(c * self.stages + stage) * n + j for c in range(self.chunks) for j in range(n)]


def global_layers(seg: Segmentation, stage: int, layout: SourceLayout, microbatches: int) -> Segmentation:
    """``seg`` with global layer numbers (and, under per-chunk numbering, the schedule's
    microbatches); unchanged when the trace numbers globally or no numbering fits (the rewrite then
    finds the layers missing and says so)."""
    want = layout.layers_of(stage)
    seen = sorted({int(x) for x in seg.layer[seg.phase == Phase.F].tolist() if x >= 0})
    if seen == want or not seen:
        return seg
    if seen == list(range(len(want))):  # numbered within the stage
        table = np.asarray(want, np.int16)
        layer = seg.layer.copy()
        lab = (seg.phase >= 0) & (layer >= 0)
        layer[lab] = table[layer[lab]]
        return dataclasses.replace(seg, layer=layer, layers=want)
    if layout.chunks > 1 and seen == list(range(layout.per_chunk)):
        return _per_chunk(seg, stage, layout, microbatches) or seg
    return seg


def _per_chunk(seg: Segmentation, stage: int, layout: SourceLayout, microbatches: int) -> Segmentation | None:
    """Per-chunk numbering: the k-th pass of a layer is the k-th step of its kind in the schedule.
    Backward work labelled through autograd sequence numbers carries its forward's pass number."""
    try:
        order = interleaved_order(stage, layout.stages, layout.chunks, microbatches)
    except ConfigError:
        return None
    steps = {ph: np.asarray([(mb, c) for p, mb, c in order if p == ph], np.int64) for ph in ("F", "B")}
    b_steps = steps["F"] if "sequence" in seg.source else steps["B"]
    layer, mb = seg.layer.copy(), seg.mb.copy()
    for phase, table in ((Phase.F, steps["F"]), (Phase.B, b_steps)):
        rows = np.flatnonzero((seg.phase == phase) & (seg.layer >= 0) & (seg.mb >= 0))
        if len(rows) == 0:
            continue
        if int(seg.mb[rows].max()) + 1 != len(table):  # not one pass per schedule step: not this layout
            return None
        mb_chunk = table[seg.mb[rows]]
        layer[rows] = (mb_chunk[:, 1] * layout.stages + stage) * layout.per_chunk + seg.layer[rows]
        mb[rows] = mb_chunk[:, 0]
    return dataclasses.replace(
        seg, layer=layer, mb=mb, layers=layout.layers_of(stage), n_microbatches=microbatches
    )
