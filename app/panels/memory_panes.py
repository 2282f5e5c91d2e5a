"""Two summary tabs: Memory (peaks per rank and iteration, top allocating operators) and Operators
(CPU operators by self and total time, calls, GPU time launched: the TensorBoard plugin's table).

Numbers come from :mod:`lumos_core.trace.memory_summary` and :mod:`lumos_core.trace.operator_stats`;
these widgets lay them out. A trace without memory records says so and how to record them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QWidget

from app.panels.table_model import Column, ns_as_ms
from app.panels.table_pane import TablePane, note_above_tables
from app.view_model.loaded_job import LoadedJob
from lumos_core.api.views import NO_MEMORY_HINT, DeviceMemory, OperatorStat, format_bytes, operator_table


@dataclass(frozen=True)
class MemoryPeakRow:
    rank: int
    device: str
    iteration: str  # "whole trace" for the overall peak
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    operator: str  # allocating operator at the allocated peak


@dataclass(frozen=True)
class AllocatingOperatorRow:
    rank: int
    device: str
    operator: str
    allocations: int
    bytes: int


def peak_rows(memory: list[list[DeviceMemory]]) -> list[MemoryPeakRow]:
    out = []
    for devices in memory:
        for d in devices:
            out.append(
                MemoryPeakRow(
                    d.rank, d.label, "whole trace", d.peak_allocated, d.peak_reserved, d.peak_operator
                )
            )
            out.extend(
                MemoryPeakRow(d.rank, d.label, it.name, it.allocated, it.reserved, it.operator)
                for it in d.iterations
            )
    return out


def allocating_rows(memory: list[list[DeviceMemory]]) -> list[AllocatingOperatorRow]:
    return [
        AllocatingOperatorRow(d.rank, d.label, o.name, o.count, o.bytes)
        for devices in memory
        for d in devices
        for o in d.top_operators
    ]


class MemoryPane(QWidget):
    """Peak memory per rank and iteration, and the operators that allocated most."""

    def __init__(self) -> None:
        super().__init__()
        self.note = QLabel(NO_MEMORY_HINT)
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.peaks = TablePane(
            "memory_peaks",
            [
                Column("rank", lambda r: r.rank, numeric=True),
                Column("device", lambda r: r.device),
                Column("iteration", lambda r: r.iteration),
                Column(
                    "peak allocated",
                    lambda r: r.peak_allocated_bytes,
                    format_bytes,
                    "Total Allocated at its peak",
                    True,
                ),
                Column(
                    "peak reserved",
                    lambda r: r.peak_reserved_bytes,
                    format_bytes,
                    "Total Reserved by the CUDA caching allocator (0 on CPU)",
                    True,
                ),
                Column("allocating operator at the peak", lambda r: r.operator),
            ],
            MemoryPeakRow,
        )
        self.operators = TablePane(
            "allocating_operators",
            [
                Column("rank", lambda r: r.rank, numeric=True),
                Column("device", lambda r: r.device),
                Column("operator", lambda r: r.operator),
                Column(
                    "allocated", lambda r: r.bytes, format_bytes, "bytes allocated inside the operator", True
                ),
                Column("allocations", lambda r: r.allocations, lambda v: f"{v:,}", numeric=True),
            ],
            AllocatingOperatorRow,
        )
        note_above_tables(self, self.note, self.peaks, self.operators)

    def set_job(self, loaded: LoadedJob | None) -> None:
        memory = (loaded.memory or []) if loaded is not None else []
        recorded = any(memory)
        self.note.setVisible(loaded is not None and not recorded)
        self.peaks.set_rows(peak_rows(memory))
        self.operators.set_rows(allocating_rows(memory), sort_column=3)


class OperatorPane(TablePane):
    """CPU operators by host self time, with the GPU time they launched; scope: all ranks or one."""

    def __init__(self) -> None:
        self.scope = QComboBox()
        super().__init__(
            "operators",
            [
                Column("operator", lambda r: r.name),
                Column("calls", lambda r: r.calls, lambda v: f"{v:,}", numeric=True),
                Column(
                    "host self (ms)", lambda r: r.host_self_ns, ns_as_ms, "time in the operator itself", True
                ),
                Column(
                    "host total (ms)", lambda r: r.host_total_ns, ns_as_ms, "including nested operators", True
                ),
                Column(
                    "GPU self (ms)",
                    lambda r: r.gpu_self_ns,
                    ns_as_ms,
                    "GPU time of kernels it launched directly",
                    True,
                ),
                Column(
                    "GPU total (ms)",
                    lambda r: r.gpu_total_ns,
                    ns_as_ms,
                    "GPU time of kernels launched inside it, nested operators included",
                    True,
                ),
                Column("ranks", lambda r: r.ranks, numeric=True),
            ],
            OperatorStat,
            [QLabel("Scope:"), self.scope],
        )
        self.loaded: LoadedJob | None = None
        self.scope.currentIndexChanged.connect(self._refresh)

    def set_job(self, loaded: LoadedJob | None) -> None:
        self.loaded = loaded
        self.scope.blockSignals(True)
        self.scope.clear()
        self.scope.addItem("all ranks", -1)
        for t in loaded.job.ranks if loaded is not None else []:
            self.scope.addItem(f"rank {t.rank}", t.rank)
        self.scope.blockSignals(False)
        self._refresh()

    def rows(self) -> list[OperatorStat]:
        if self.loaded is None:
            return []
        rank = self.scope.currentData()
        if (rank is None or rank < 0) and self.loaded.operators is not None:
            return self.loaded.operators  # all ranks: computed with the job's summaries, on the worker
        return operator_table(self.loaded.job, None if rank is None or rank < 0 else int(rank))

    def _refresh(self, *_: object) -> None:
        self.set_rows(self.rows()[:2000], sort_column=2)
