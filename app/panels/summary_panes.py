"""Summary panes beside the timeline: iterations and breakdown, top kernels, collectives, clocks, files.

Every number comes from :mod:`lumos_core.replay.summaries`; these widgets only lay it out. Each table can be
exported as CSV (same rows, raw units: ns, bytes, GB/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QPlainTextEdit,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.panels.idle_pane import IdlePane
from app.panels.memory_panes import MemoryPane, OperatorPane
from app.panels.rank_elide import KeepRankDelegate
from app.panels.straggler_pane import StragglerPane
from app.panels.table_model import Column, ns_as_ms, ns_as_us
from app.panels.table_pane import TablePane, write_tables
from app.plot_theme import theme_plot
from app.theme import LIGHT, Theme
from app.view_model.loaded_job import LoadedJob
from lumos_core.api.views import (
    ChartBar,
    ClockStat,
    CollectiveStat,
    Family,
    IterationStat,
    KernelStat,
    RankBreakdownStat,
    consecutive_groups,
    default_role,
    group_bars,
    rank_breakdown_table,
    rank_from_file_name,
    rank_groups,
    top_kernels,
)

BREAKDOWN = [
    ("exposed compute", "#4E79A7"),
    ("overlapped", "#76B7B2"),
    ("exposed communication", "#F28E2B"),
    ("other", "#BAB0AC"),
]
_LABEL_TO_FAMILY = {f.label: f for f in Family}
_COLL_FAMILY = {
    "AllReduce": Family.NCCL_ALL_REDUCE,
    "AllGather": Family.NCCL_ALL_GATHER,
    "ReduceScatter": Family.NCCL_REDUCE_SCATTER,
    "AllToAll": Family.NCCL_ALL_TO_ALL,
    "Broadcast": Family.NCCL_BROADCAST,
    "Reduce": Family.NCCL_REDUCE,
    "Send": Family.NCCL_P2P,
    "Recv": Family.NCCL_P2P,
    "SendRecv": Family.NCCL_P2P,
}


@dataclass(frozen=True)
class FileStatus:
    file: str
    state: str  # cached, loaded, failed
    detail: str
    rank: int = -1  # once the job is assembled


def file_status(file: str, state: str, detail: str) -> FileStatus:
    """A file's row before the job is assembled: the rank its name gives (the loader's reading)."""
    guess = rank_from_file_name(Path(file).name)
    return FileStatus(file, state, detail, -1 if guess is None else guess)


def _size(n: int) -> str:
    if n < 0:
        return "?"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def _gbps(v: float) -> str:
    return "" if math.isnan(v) else f"{v:,.1f}"


class IterationChart(pg.PlotWidget):
    """Per rank, the mean iteration split into exposed compute / overlapped / comm / idle (ms)."""

    def __init__(self, theme: Theme) -> None:
        super().__init__()
        self.theme = theme
        self.bars: list[pg.GraphicsObject] = []
        self.shown: list[ChartBar] = []  # the bars drawn, top to bottom
        self.plotItem.setMenuEnabled(False)
        self.plotItem.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.getViewBox().invertY(True)
        self.setLabel("bottom", "mean iteration (ms)")
        self.getAxis("bottom").enableAutoSIPrefix(False)
        self.setMinimumHeight(140)
        self.apply_theme(theme)

    def set_rows(self, rows: list[RankBreakdownStat], bars: list[ChartBar] | None = None) -> None:
        """One bar per rank, or the given aggregated ``bars`` (groups with their members' spread as
        a whisker, then outlier ranks) for jobs too big for a bar per rank."""
        for b in self.bars:
            self.removeItem(b)
        self.bars = []
        if bars is None:
            bars = [
                ChartBar(
                    f"rank {r.rank}",
                    1,
                    *(
                        v / max(r.iterations, 1)
                        for v in (r.exposed_compute_ns, r.overlapped_ns, r.exposed_comm_ns, r.other_ns)
                    ),
                    r.mean_iteration_ns,
                    r.mean_iteration_ns,
                )
                for r in rows
            ]
        self.shown = bars
        if not bars:
            return
        y = np.arange(len(bars), dtype=float)
        parts = [
            np.asarray([b.exposed_compute_ns for b in bars], float),
            np.asarray([b.overlapped_ns for b in bars], float),
            np.asarray([b.exposed_comm_ns for b in bars], float),
            np.asarray([b.other_ns for b in bars], float),
        ]
        left = np.zeros(len(bars))
        for (label, color), values in zip(BREAKDOWN, parts):
            width = values / 1e6
            bar = pg.BarGraphItem(
                x0=left, y=y, height=0.7, width=width, brush=QColor(color), pen=pg.mkPen(None)
            )
            bar.setToolTip(label)
            self.addItem(bar)
            self.bars.append(bar)
            left = left + width
        lo = np.asarray([b.low_ns for b in bars]) / 1e6
        hi = np.asarray([b.high_ns for b in bars]) / 1e6
        spread = np.flatnonzero(hi > lo)
        if len(spread):  # groups: the range of their members' mean iteration
            whisker = pg.ErrorBarItem(
                x=(lo[spread] + hi[spread]) / 2,
                y=y[spread],
                width=(hi[spread] - lo[spread]),
                beam=0.3,
                pen=pg.mkPen(self.theme.foreground),
            )
            self.addItem(whisker)
            self.bars.append(whisker)
        step = max(1, math.ceil(len(bars) / 24))
        ticks = [
            (float(i), f"{b.label} ×{b.ranks}" if b.ranks > 1 else b.label)
            for i, b in enumerate(bars)
            if i % step == 0 or b.outlier
        ]
        self.getAxis("left").setTicks([ticks])
        self.setYRange(-0.6, len(bars) - 0.4, padding=0)
        self.setXRange(0, float(max(left.max(), hi.max())) * 1.02 if len(left) else 1.0, padding=0)

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        theme_plot(self, theme)


MAX_RANK_BARS = 32  # more ranks than this: one bar per group, and the outliers
MAX_CHART_GROUPS = 24


def chart_rows(loaded: LoadedJob) -> tuple[list[RankBreakdownStat], list[ChartBar] | None]:
    """The iterations chart's rows: one per rank, or bars per group of ranks (pipeline stages, TP
    groups or replicas from the inferred layout, else runs of consecutive ranks) and the outliers."""
    rows = rank_breakdown_table(loaded.iterations)
    if len(rows) <= MAX_RANK_BARS:
        return rows, None
    ranks = [t.rank for t in loaded.job.ranks]
    role = default_role(loaded.baseline)
    groups = (
        [(g.label, [ranks[i] for i in g.members]) for g in rank_groups(loaded.baseline, ranks, role)]
        if role
        else []
    )
    if not 1 < len(groups) <= MAX_CHART_GROUPS:
        groups = consecutive_groups([r.rank for r in rows], 16)
    flagged = {r.rank for r in loaded.stragglers.flagged} if loaded.stragglers is not None else set()
    return rows, group_bars(rows, groups, flagged)


def _family_color(theme: Theme, fam: Family | None) -> QColor | None:
    return theme.family_color(int(fam)) if fam is not None else None


class SummaryPanes(QTabWidget):
    """The tabs; :meth:`set_job` fills them, :meth:`set_file_status` follows a load live."""

    rank_scope_changed = Signal(int)

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.loaded: LoadedJob | None = None
        self._files: dict[str, FileStatus] = {}
        self._files_timer = QTimer(self)
        self._files_timer.setSingleShot(True)
        self._files_timer.setInterval(200)
        self._files_timer.timeout.connect(self._refresh_files)
        self._build_iterations()
        self._build_kernels()
        self._build_collectives()
        self._build_clocks()
        self._build_memory()
        self._build_files()

    # ---- construction
    def _build_iterations(self) -> None:
        self.chart = IterationChart(self.theme)
        legend = " ".join(
            f"<span style='color:{c}'>■</span>&nbsp;{label}&nbsp;&nbsp;" for label, c in BREAKDOWN
        )
        self.chart_legend = QLabel(legend)
        self.chart_legend.setWordWrap(True)
        cols = [
            Column("rank", lambda r: r.rank, numeric=True),
            Column("iteration", lambda r: r.iteration),
            Column("start (ms)", lambda r: r.start_ns, ns_as_ms, numeric=True),
            Column("time (ms)", lambda r: r.dur_ns, ns_as_ms, numeric=True),
            Column(
                "compute (ms)",
                lambda r: r.exposed_compute_ns,
                ns_as_ms,
                "compute not overlapped by communication",
                True,
            ),
            Column(
                "overlapped (ms)",
                lambda r: r.overlapped_ns,
                ns_as_ms,
                "compute and communication at once",
                True,
            ),
            Column(
                "comm (ms)",
                lambda r: r.exposed_comm_ns,
                ns_as_ms,
                "communication not hidden by compute",
                True,
            ),
            Column("other (ms)", lambda r: r.other_ns, ns_as_ms, "idle: no GPU activity on any stream", True),
        ]
        self.iterations = TablePane("iterations", cols, IterationStat)
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Orientation.Vertical)
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(4, 4, 4, 0)
        tl.addWidget(self.chart, 1)
        tl.addWidget(self.chart_legend)
        split.addWidget(top)
        split.addWidget(self.iterations)
        split.setSizes([260, 200])
        lay.addWidget(split)
        self.addTab(box, "Iterations")

    def _build_kernels(self) -> None:
        self.kernel_scope = QComboBox()
        self.kernel_scope.currentIndexChanged.connect(self._on_kernel_scope)
        cols = [
            Column(
                "kernel",
                lambda r: r.name,
                color=lambda r: _family_color(self.theme, _LABEL_TO_FAMILY.get(r.family)),
            ),
            Column("total (ms)", lambda r: r.total_ns, ns_as_ms, numeric=True),
            Column("share", lambda r: r.share, lambda v: f"{100 * v:.1f} %", "of summed GPU time", True),
            Column("count", lambda r: r.count, lambda v: f"{v:,}", numeric=True),
            Column("mean (µs)", lambda r: r.mean_ns, ns_as_us, numeric=True),
            Column("family", lambda r: r.family),
            Column("ranks", lambda r: r.ranks, numeric=True),
        ]
        self.kernels = TablePane("top_kernels", cols, KernelStat, [QLabel("Scope:"), self.kernel_scope])
        self.addTab(self.kernels, "Top kernels")

    def _build_collectives(self) -> None:
        cols = [
            Column("#", lambda r: r.instance, numeric=True),
            Column(
                "kind",
                lambda r: r.kind,
                color=lambda r: _family_color(self.theme, _COLL_FAMILY.get(r.kind, Family.NCCL_OTHER)),
            ),
            Column(
                "size",
                lambda r: r.size_bytes,
                _size,
                "message size per rank (NCCL-tests convention); ?: not recorded (see 'window')",
                True,
            ),
            Column(
                "bus BW (GB/s)",
                lambda r: r.bus_bw_gbps,
                _gbps,
                "size × NCCL-tests factor / shortest duration (the last rank to arrive barely waits)",
                True,
            ),
            Column("median (µs)", lambda r: r.dur_median_ns, ns_as_us, "median duration over ranks", True),
            Column("skew (µs)", lambda r: r.skew_ns, ns_as_us, "spread of start times across ranks", True),
            Column(
                "min (µs)",
                lambda r: r.dur_min_ns,
                ns_as_us,
                "shortest duration (the rank that arrived last)",
                True,
            ),
            Column(
                "max (µs)",
                lambda r: r.dur_max_ns,
                ns_as_us,
                "longest duration (includes waiting for others)",
                True,
            ),
            Column("ranks", lambda r: r.ranks, numeric=True),
            Column("start (ms)", lambda r: r.start_ns, ns_as_ms, "earliest start over ranks", True),
            Column("group", lambda r: r.group),
            Column(
                "window",
                lambda r: "cut off" if r.cut_off else "",
                tooltip="cut off: the profiling window's edge cuts this instance (a rank lacks it, or "
                "launched it before the window, so its size is usually unknown); listed last, greyed",
            ),
        ]
        self.collectives = TablePane("collectives", cols, CollectiveStat)
        self.collectives.model.muted = lambda r: r.cut_off
        self.addTab(self.collectives, "Collectives")

    def _build_clocks(self) -> None:
        cols = [
            Column("rank", lambda r: r.rank, numeric=True),
            Column(
                "applied (µs)",
                lambda r: r.applied_offset_ns,
                ns_as_us,
                "shift already applied to the rank's times",
                True,
            ),
            Column("estimated (µs)", lambda r: r.estimated_offset_ns, ns_as_us, numeric=True),
            Column("residual (µs)", lambda r: r.residual_ns, ns_as_us, "spread left after alignment", True),
            Column("anchors", lambda r: r.anchors, numeric=True),
            Column("reference", lambda r: r.reference, lambda v: "yes" if v else ""),
        ]
        self.clock_note = QLabel()
        self.clock_note.setWordWrap(True)
        self.clocks = TablePane("clocks", cols, ClockStat)
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.clocks, 1)
        lay.addWidget(self.clock_note)
        self.addTab(box, "Clocks")

    def _build_memory(self) -> None:
        self.memory = MemoryPane()
        self.addTab(self.memory, "Memory")
        self.operators = OperatorPane()
        self.addTab(self.operators, "Operators")
        self.idle = IdlePane()
        self.addTab(self.idle, "Idle")
        self.stragglers = StragglerPane()
        self.addTab(self.stragglers, "Stragglers")

    def _build_files(self) -> None:
        cols = [
            Column("rank", lambda r: r.rank, lambda v: "" if v < 0 else str(v), numeric=True),
            Column("state", lambda r: r.state),
            Column("file", lambda r: Path(r.file).name),
            Column("detail", lambda r: r.detail),
        ]
        self.files = TablePane("files", cols, FileStatus)
        # file names often differ only in the middle (a hash, the rank): the rank stays whole
        self.files.view.setItemDelegateForColumn(2, KeepRankDelegate(self.files.view))
        self.warnings = QPlainTextEdit()
        self.warnings.setReadOnly(True)
        self.warnings.setPlaceholderText("No warnings.")
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.files)
        split.addWidget(self.warnings)
        lay.addWidget(split)
        self.files_tab = box
        self.addTab(box, "Files")

    # ---- filling
    def set_job(self, loaded: LoadedJob | None) -> None:
        self.loaded = loaded
        if loaded is None:
            for pane in (self.iterations, self.kernels, self.collectives, self.clocks):
                pane.set_rows([])
            self.chart.set_rows([])
            self.memory.set_job(None)
            self.operators.set_job(None)
            self.idle.set_job(None)
            self.stragglers.set_job(None)
            return
        self.iterations.set_rows(loaded.iterations)
        self.chart.set_rows(*chart_rows(loaded))
        self.kernel_scope.blockSignals(True)
        self.kernel_scope.clear()
        self.kernel_scope.addItem("all ranks", -1)
        for t in loaded.job.ranks:
            self.kernel_scope.addItem(f"rank {t.rank}", t.rank)
        self.kernel_scope.blockSignals(False)
        self.kernels.set_rows(loaded.kernels[:500], sort_column=1)
        self.collectives.set_rows(loaded.collectives)
        self.clocks.set_rows(loaded.clocks)
        self.memory.set_job(loaded)
        self.operators.set_job(loaded)
        self.idle.set_job(loaded)
        self.stragglers.set_job(loaded)
        align = loaded.job.alignment or {}
        notes = "; ".join(align.get("notes") or [])
        applied = "applied" if align.get("applied") else "not applied"
        self.clock_note.setText(
            f"Clock alignment on collective end times: {applied}. {notes}" if align else "No clock alignment."
        )
        for s in loaded.job.skipped:
            self._files[s.file] = file_status(s.file, "failed", s.reason)
        for t in loaded.job.ranks:
            prev = self._files.get(t.file)
            state = prev.state if prev and prev.state in ("cached", "loaded") else "loaded"
            self._files[t.file] = FileStatus(
                t.file, state, f"rank {t.rank} ({t.rank_source}), {len(t):,} events", t.rank
            )
        self._refresh_files()
        self.warnings.setPlainText("\n".join(loaded.job.warnings))

    def start_load(self) -> None:
        self._files = {}
        self._refresh_files()
        self.warnings.setPlainText("")

    def set_file_status(self, file: str, state: str, detail: str) -> None:
        # the table follows every 200 ms: a refresh per file of a 256-rank job held the GIL for seconds
        self._files[file] = file_status(file, state, detail)
        if not self._files_timer.isActive():
            self._files_timer.start()

    def set_load_error(self, message: str) -> None:
        self.warnings.setPlainText(message)

    def _refresh_files(self) -> None:
        self._files_timer.stop()
        self.files.set_rows(
            sorted(self._files.values(), key=lambda f: (f.state != "failed", Path(f.file).name))
        )

    def _on_kernel_scope(self, _index: int) -> None:
        if self.loaded is None:
            return
        rank = self.kernel_scope.currentData()
        rows = (
            self.loaded.kernels if rank is None or rank < 0 else top_kernels(self.loaded.job, int(rank), None)
        )
        self.kernels.set_rows(rows[:500], sort_column=1)
        self.rank_scope_changed.emit(-1 if rank is None else int(rank))

    def tables(self) -> dict[str, tuple[list[Any], type]]:
        """Every table (full rows, not just what is shown) for CSV export."""
        if self.loaded is None:
            return {}
        lj = self.loaded
        return {
            "iterations": (lj.iterations, IterationStat),
            "rank_breakdown": (rank_breakdown_table(lj.iterations), RankBreakdownStat),
            "top_kernels": (lj.kernels, KernelStat),
            "collectives": (lj.collectives, CollectiveStat),
            "clocks": (lj.clocks, ClockStat),
            "memory_peaks": (self.memory.peaks.model.rows, self.memory.peaks.row_type),
            "allocating_operators": (self.memory.operators.model.rows, self.memory.operators.row_type),
            "operators": (self.operators.rows(), self.operators.row_type),
            "idle_causes": (self.idle.causes.model.rows, self.idle.causes.row_type),
            "unexplained_delays": (self.idle.delays.model.rows, self.idle.delays.row_type),
        }

    def export_all(self, folder: str | Path) -> list[Path]:
        return write_tables(self.tables(), folder)

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.chart.apply_theme(theme)
