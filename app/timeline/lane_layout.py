"""Which row of the timeline shows what: rank headers, GPU stream lanes, CPU threads.

Every row is one unit of height. A rank group is a header row, then its GPU streams (compute first,
one row per overlap sub-row), then its memory lane (:data:`MEMORY_ROWS` rows, drawn by
:mod:`app.timeline.memory_lane`; only when the trace has memory records), then its CPU threads. CPU threads are collapsed by default into one
summary row; a collapsed rank is just its header row, which then shows its streams overlaid.
A row lists its *sources*: the (lane, depth) rows of the rank's :class:`~app.view_model.lane_data.RowTable`
that it draws, so a second layer with the same lane indexing draws into the same rows. A row may be
restricted to one layer (``Row.layer``): *paired* layouts follow every row of the measured layer
(0) with a twin row of the predicted layer (1), and a layout can show one layer only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from app.view_model.lane_data import RowTable
from app.view_model.row_tables import RowShape, table_shape
from lumos_core.trace.model import LaneRole, RankTrace

_GPU_ROLE_ORDER = {LaneRole.COMPUTE: 0, LaneRole.COMMUNICATION: 1, LaneRole.MEMCPY: 2, LaneRole.GPU_OTHER: 3}
_CPU_ROLE_ORDER = {LaneRole.CPU_MAIN: 0, LaneRole.CPU_AUTOGRAD: 1, LaneRole.CPU_OTHER: 2}


class RowKind(Enum):
    RANK = "rank"  # the rank's header
    GPU = "gpu"  # a stream (sub-row ``depth``)
    CPU_GROUP = "cpu group"  # all CPU threads, collapsed
    CPU = "cpu"  # one thread, nesting level ``depth``
    MEMORY = "memory"  # the rank's memory curve, ``depth`` 0..MEMORY_ROWS-1 of one band


MEMORY_ROWS = 3  # the memory lane is this many rows tall: a curve needs more than one row


@dataclass
class Row:
    kind: RowKind
    rank_index: int  # index into job.ranks
    lane: int = -1
    depth: int = 0
    label: str = ""
    sources: list[tuple[int, int]] = field(default_factory=list)  # (lane, depth) drawn here
    layer: int | None = None  # the only layer drawn in this row (None: every layer)


class LaneLayout:
    """Rows of the whole job; rebuild after changing what is collapsed (``version`` changes)."""

    def __init__(
        self,
        ranks: list[RankTrace],
        tables: list[RowTable],
        rank_labels: list[str] | None = None,
        paired: bool = False,
        only_layer: int | None = None,
        order: list[int] | None = None,
    ) -> None:
        self.ranks = ranks
        self.tables = tables
        # rank indices in display order (default: all, in index order); ranks left out get no rows
        self.order = order
        self.rank_labels = rank_labels  # header text per rank index (default: "rank N · device")
        self.paired = paired  # every row of layer 0 is followed by a twin of layer 1
        self.only_layer = only_layer  # every row draws this layer only (when not paired)
        self.collapsed_ranks: set[int] = set()
        # a rank with no GPU stream (a CPU-only job) has nothing but its threads to show: they start
        # expanded, or the rank is one summary row with its step annotations
        self.expanded_cpu: set[int] = {i for i, r in enumerate(ranks) if not any(ln.is_gpu for ln in r.lanes)}
        self.rows: list[Row] = []
        self.group_bounds: list[tuple[int, int]] = []  # per rank index: [first row, end row)
        self.version = 0
        self._lane_rows: dict[tuple[int, int, int, int], int] = {}
        self.rebuild()

    def __len__(self) -> int:
        return len(self.rows)

    def rebuild(self) -> None:
        rows: list[Row] = []
        bounds: list[tuple[int, int]] = [(0, 0)] * len(self.ranks)  # by rank index
        default_layer = None if self.paired else self.only_layer

        def add(row: Row) -> None:
            row.layer = 0 if self.paired else default_layer
            rows.append(row)
            if self.paired:  # the predicted twin right below the measured row
                kind = RowKind.GPU if row.kind == RowKind.RANK else row.kind  # a plain row, not a header
                rows.append(
                    Row(kind, row.rank_index, row.lane, row.depth, "↳ predicted", list(row.sources), 1)
                )

        for ri in self.order if self.order is not None else range(len(self.ranks)):
            rank, table = self.ranks[ri], table_shape(self.tables, ri)  # never builds a table
            first = len(rows)
            gpu, cpu = _ordered_lanes(rank, table)
            label = self.rank_labels[ri] if self.rank_labels else _rank_label(rank)
            if ri in self.collapsed_ranks:
                add(
                    Row(
                        RowKind.RANK,
                        ri,
                        label=label,
                        sources=[(ln, d) for ln in gpu for d in range(table.depths.get(ln, 0))],
                    )
                )
                bounds[ri] = (first, len(rows))
                continue
            rows.append(Row(RowKind.RANK, ri, label=label, layer=default_layer))
            for ln in gpu:
                lane = rank.lanes[ln]
                for d in range(table.depths.get(ln, 1)):
                    text = f"rank {rank.rank} ▸ {lane.label}" if d == 0 else "↳ overlapping"
                    add(Row(RowKind.GPU, ri, ln, d, text, [(ln, d)]))
            if len(rank.memory) and self.only_layer in (None, 0):  # measured records only
                gpu = bool((rank.memory.device_type == 1).any())
                top = max(int(rank.memory.allocated.max()), int(rank.memory.reserved.max()))
                texts = [
                    f"rank {rank.rank} ▸ memory ({'GPU' if gpu else 'CPU'})",
                    "allocated (filled)" + (", reserved (dashed)" if gpu else ""),
                    f"scale 0 - {top / 2**20:,.1f} MiB",
                ]
                for d in range(MEMORY_ROWS):
                    rows.append(
                        Row(RowKind.MEMORY, ri, -1, d, texts[d], [], 0 if self.paired else default_layer)
                    )
            if cpu:
                if ri in self.expanded_cpu:
                    for ln in cpu:
                        lane = rank.lanes[ln]
                        for d in range(max(1, table.depths.get(ln, 1))):
                            text = f"rank {rank.rank} ▸ {lane.label}" if d == 0 else ""
                            add(Row(RowKind.CPU, ri, ln, d, text, [(ln, d)]))
                else:
                    n = len(cpu)
                    add(
                        Row(
                            RowKind.CPU_GROUP,
                            ri,
                            label=f"rank {rank.rank} ▸ CPU: {n} thread{'s' * (n != 1)}",
                            sources=[(ln, 0) for ln in cpu],
                        )
                    )
            bounds[ri] = (first, len(rows))
        self.rows = rows
        self.group_bounds = bounds
        self._lane_rows = {}
        for i, row in enumerate(rows):
            for ln, d in row.sources:
                self._lane_rows.setdefault((row.rank_index, ln, d, row.layer or 0), i)
        self.version += 1

    # ---- collapsing
    def toggle_rank(self, rank_index: int) -> None:
        self.collapsed_ranks ^= {rank_index}
        self.rebuild()

    def toggle_cpu(self, rank_index: int) -> None:
        self.expanded_cpu ^= {rank_index}
        self.rebuild()

    def set_all_ranks_collapsed(self, collapsed: bool) -> None:
        self.collapsed_ranks = set(range(len(self.ranks))) if collapsed else set()
        self.rebuild()

    def set_all_cpu_expanded(self, expanded: bool) -> None:
        self.expanded_cpu = set(range(len(self.ranks))) if expanded else set()
        self.rebuild()

    # ---- lookups
    def row_at(self, y: float) -> Row | None:
        i = int(y) if y >= 0 else -1
        return self.rows[i] if 0 <= i < len(self.rows) else None

    def row_showing(self, rank_index: int, lane: int, depth: int, layer: int = 0) -> int:
        """Row that shows (lane, depth) of a rank in ``layer``: its own row, or the collapsed row
        that stands for it (CPU summary row, rank header); -1 if none. The layer only matters in
        paired layouts (elsewhere every row draws every layer)."""
        key = layer if self.paired else (self.only_layer or 0)
        row = self._lane_rows.get((rank_index, lane, depth, key))
        if row is not None:
            return row
        row = self._lane_rows.get((rank_index, lane, 0, key))
        if row is not None:
            return row
        if 0 <= rank_index < len(self.group_bounds):
            first, end = self.group_bounds[rank_index]
            for i in range(first, end):
                r = self.rows[i]
                cpu = r.kind == RowKind.CPU_GROUP and not self.ranks[rank_index].lanes[lane].is_gpu
                if cpu and (not self.paired or r.layer == layer):
                    return i
            if self.paired and layer == 1 and first + 1 < end and self.rows[first + 1].layer == 1:
                return first + 1  # a collapsed rank: the header's predicted twin
            return first
        return -1


def _ordered_lanes(rank: RankTrace, table: RowTable | RowShape) -> tuple[list[int], list[int]]:
    """GPU lanes (compute, communication, memcpy, other; then stream id) and CPU lanes (main thread
    first) that have something to draw."""
    present = {ln for ln, _ in table.keys}
    gpu = [ln.index for ln in rank.lanes if ln.is_gpu and ln.index in present]
    cpu = [ln.index for ln in rank.lanes if not ln.is_gpu and ln.index in present]
    gpu.sort(key=lambda i: (_GPU_ROLE_ORDER.get(rank.lanes[i].role, 9), rank.lanes[i].stream))
    cpu.sort(key=lambda i: (_CPU_ROLE_ORDER.get(rank.lanes[i].role, 9), rank.lanes[i].tid))
    return gpu, cpu


def _rank_label(rank: RankTrace) -> str:
    return f"rank {rank.rank} · {rank.device_name}"
