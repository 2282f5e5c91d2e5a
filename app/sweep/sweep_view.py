"""Sweep one knob (e.g. DP 8 → 512): iteration time and breakdown per value, as a chart and a table.

A one-knob sweep is a one-axis grid (:func:`lumos_core.sweep.run.run_axis`): each row is one
``estimate()``, run in the background like any other request, and the rows save as ``lumos sweep``
results. Double-click a row to keep that value as a scenario (it is estimated again, with its
predicted timeline). :class:`SweepChart` also draws a slice of the Sweep dialog's grids.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.panels.summary_panes import BREAKDOWN, TablePane
from app.panels.table_model import Column, ms_or_blank
from app.plot_theme import theme_plot
from app.sweep.sources import AxisSweep
from app.sweep.sweep_csv import ask_sweep_csv, save_sweep_rows
from app.theme import LIGHT, Theme
from lumos_core.api.knobs import GPU_BOUND_CPU_SCALE, KNOB, Baseline
from lumos_core.api.sweep import GridRow, default_values, parse_values
from lumos_core.errors import LumosError

SWEEP_KNOBS = [k for k in KNOB if k != "schedule"]


class SweepChart(pg.PlotWidget):
    """Stacked breakdown bars per value, the iteration time on top as a line."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.items: list[Any] = []
        self.plotItem.setMenuEnabled(False)
        self.plotItem.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.setLabel("left", "iteration time (ms)")
        self.getAxis("left").enableAutoSIPrefix(False)
        self.apply_theme(theme)

    def set_rows(self, knob: str, rows: list[GridRow]) -> None:
        """One bar stack per row, in order, labelled with its value of ``knob``."""
        points = rows
        for item in self.items:
            self.removeItem(item)
        self.items = []
        self.setLabel("bottom", knob)
        if not points:
            return
        x = np.arange(len(points), dtype=float)
        ok = [p.ok and p.breakdown is not None for p in points]  # no answer: skipped or out of memory
        parts = (
            np.asarray(
                [
                    [b.exposed_compute_ns, b.overlapped_ns, b.exposed_comm_ns, b.other_ns]
                    if (b := p.breakdown)
                    else [0, 0, 0, 0]
                    for p in points
                ],
                float,
            )
            / 1e6
        )
        bottom = np.zeros(len(points))
        for k, (label, color) in enumerate(BREAKDOWN):
            bar = pg.BarGraphItem(
                x=x, y0=bottom, height=parts[:, k], width=0.6, brush=QColor(color), pen=pg.mkPen(None)
            )
            bar.setToolTip(label)
            self.addItem(bar)
            self.items.append(bar)
            bottom = bottom + parts[:, k]
        t = np.asarray([p.iteration_us / 1000 if ok[i] else np.nan for i, p in enumerate(points)])
        line = pg.PlotDataItem(
            x,
            t,
            pen=pg.mkPen(self._fg, width=2),
            symbol="o",
            symbolSize=7,
            symbolBrush=self._fg,
            connect="finite",
        )
        self.addItem(line)
        self.items.append(line)
        for i, p in enumerate(points):
            text = f"{p.iteration_us / 1000:.1f}" if ok[i] else "✕"
            label = pg.TextItem(text, color=self._fg, anchor=(0.5, 1.2))
            label.setPos(float(i), float(t[i]) if ok[i] else 0.0)
            if not ok[i]:
                label.setToolTip(p.note)
            self.addItem(label)
            self.items.append(label)
        self.getAxis("bottom").setTicks(
            [[(float(i), f"{p.changes.get(knob)}\n{p.world_size} GPUs") for i, p in enumerate(points)]]
        )
        top = np.nanmax(t) if np.isfinite(t).any() else 1.0
        self.setYRange(0, float(top) * 1.15, padding=0)
        self.setXRange(-0.6, len(points) - 0.4, padding=0)

    def apply_theme(self, theme: Theme) -> None:
        self._fg = QColor(theme.foreground)
        theme_plot(self, theme)


def _bd_ms(row: GridRow, part: str) -> float:
    b = row.breakdown
    return math.nan if b is None else getattr(b, part) / 1e6


def row_columns(first: Column, tokens: bool = False, memory: bool = False) -> list[Column]:
    """Table columns of sweep rows: ``first`` (what names a row), then the numbers, then why a row
    was skipped."""
    pct = Column(
        "vs baseline", lambda r: r.change_pct, lambda v: "" if math.isnan(v) else f"{v:+.1f} %", numeric=True
    )
    per_gpu = Column(
        "tokens/s/GPU",
        lambda r: r.tokens_per_s_per_gpu,
        lambda v: "" if math.isnan(v) else f"{v:,.0f}",
        numeric=True,
    )
    mfu = Column(
        "MFU",
        lambda r: 100 * r.mfu,
        lambda v: "" if math.isnan(v) else f"{v:.1f} %",
        "model FLOPs utilisation: model FLOPs per iteration over the GPUs' bf16 peak",
        True,
    )
    peak = Column(
        "memory (GiB)",
        lambda r: r.peak_memory_bytes / 2**30 if r.peak_memory_bytes >= 0 else math.nan,
        lambda v: "" if math.isnan(v) else f"{v:,.1f}",
        "predicted peak memory per GPU",
        True,
    )
    return [
        first,
        Column("GPUs", lambda r: r.world_size, numeric=True),
        *([per_gpu, mfu] if tokens else []),
        Column("iteration (ms)", lambda r: r.iteration_us / 1000, ms_or_blank, numeric=True),
        Column(
            "compute", lambda r: _bd_ms(r, "exposed_compute_ns"), ms_or_blank, "exposed compute (ms)", True
        ),
        Column("overlapped", lambda r: _bd_ms(r, "overlapped_ns"), ms_or_blank, numeric=True),
        Column(
            "comm", lambda r: _bd_ms(r, "exposed_comm_ns"), ms_or_blank, "exposed communication (ms)", True
        ),
        Column("idle", lambda r: _bd_ms(r, "other_ns"), ms_or_blank, numeric=True),
        pct,
        *([peak] if memory else []),
        Column("problem", lambda r: "" if r.ok else r.note),
    ]


class SweepView(QWidget):
    """See the module docstring."""

    sweep_requested = Signal(str, list)  # knob, values
    keep_requested = Signal(str, object)  # knob, value: estimate it as a scenario

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.baseline: Baseline | None = None
        self.outcome: AxisSweep | None = None
        self.shown_knob = ""
        self.knob = QComboBox()
        for k in SWEEP_KNOBS:
            self.knob.addItem(k, k)
        self.knob.currentIndexChanged.connect(self._suggest_values)
        self.values = QLineEdit()
        self.values.setPlaceholderText("values, e.g. 8, 16, 32 (or 8-512 for powers of two)")
        self.values.returnPressed.connect(self.run)
        self.run_button = QPushButton("Run sweep")
        self.run_button.clicked.connect(self.run)
        self.message = QLabel()
        self.message.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Knob:"))
        top.addWidget(self.knob)
        top.addWidget(QLabel("Values:"))
        top.addWidget(self.values, 1)
        top.addWidget(self.run_button)
        self.chart = SweepChart(theme)
        legend = " ".join(
            f"<span style='color:{c}'>■</span>&nbsp;{label}&nbsp;&nbsp;" for label, c in BREAKDOWN
        )
        legend += "&nbsp;&nbsp;— iteration time"
        self.legend = QLabel(legend)
        self.table = TablePane(
            "sweep",
            row_columns(Column("value", lambda r: r.changes.get(self.shown_knob)), tokens=True),
            GridRow,
        )
        self.table.export_button.hide()  # the rows save as a results file (Save CSV)
        self.save_button = QPushButton("Save CSV…")
        self.save_button.setToolTip("The rows as a results file (as lumos sweep --out)")
        self.save_button.clicked.connect(self.ask_save)
        self.save_button.setEnabled(False)
        top.addWidget(self.save_button)
        self.table.view.setSortingEnabled(False)
        self.table.view.doubleClicked.connect(self._on_double_click)
        self.table.view.setToolTip("Double-click a value to keep it as a scenario")
        chart_box = QWidget()
        cl = QVBoxLayout(chart_box)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.chart, 1)
        cl.addWidget(self.legend)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(chart_box)
        split.addWidget(self.table)
        split.setSizes([450, 250])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.message)
        lay.addWidget(split, 1)
        self.set_baseline(None)

    def set_baseline(self, baseline: Baseline | None) -> None:
        self.baseline = baseline
        self.run_button.setEnabled(baseline is not None)
        self._suggest_values()

    def _suggest_values(self) -> None:
        knob = self.knob.currentData()
        current = getattr(self.baseline.config, knob) if self.baseline is not None else None
        vals = default_values(knob, current) if current is not None or knob == "gpu" else []
        self.values.setText(", ".join(str(v) for v in vals))

    def run(self) -> None:
        knob = str(self.knob.currentData())
        try:
            values = parse_values(knob, self.values.text())
        except LumosError as exc:
            self.message.setText(f"<span style='color:#B42318'>{html.escape(str(exc))}</span>")
            return
        if not values:
            self.message.setText("Give at least one value.")
            return
        self.message.setText(f"Sweeping {html.escape(knob)} over {len(values)} values…")
        self.sweep_requested.emit(knob, values)

    def show_outcome(self, outcome: AxisSweep) -> None:
        self.outcome = outcome
        self.shown_knob = outcome.knob
        self.chart.set_rows(outcome.knob, outcome.rows)
        self.table.set_rows(outcome.rows)
        self.save_button.setEnabled(True)
        bad = sum(not r.ok for r in outcome.rows)
        paced = [r.cpu_paced for r in outcome.rows if r.cpu_paced == r.cpu_paced]
        warn = (
            f"<b style='color:#B45309'>⚠ CPU-paced by {100 * max(paced):.0f} %: the host hides these GPU "
            f"what-ifs; sweep again with Host time × {GPU_BOUND_CPU_SCALE} (assume GPU-bound).</b> "
            if paced
            else ""
        )
        self.message.setText(
            warn
            + f"{html.escape(outcome.knob)}: {len(outcome.rows)} values in {outcome.seconds:.1f} s"
            + (f"; {bad} could not be estimated (see the problem column)" if bad else "")
            + ". Double-click a row to keep it as a scenario."
        )

    def show_message(self, text: str) -> None:
        self.message.setText(html.escape(text))

    def _on_double_click(self, index) -> None:  # type: ignore[no-untyped-def]
        if self.outcome is None:
            return
        row = self.outcome.rows[self.table.proxy.mapToSource(index).row()]
        if row.ok:
            self.keep_requested.emit(self.outcome.knob, row.changes[self.outcome.knob])

    def ask_save(self) -> None:
        if path := ask_sweep_csv(self):
            self.save_csv(path)

    def save_csv(self, path: str) -> None:
        """The rows as ``lumos sweep --out`` writes them (so the CLI can resume from the file)."""
        if self.outcome is None:
            return
        save_sweep_rows(path, self.outcome.report.grid.columns, self.outcome.rows)

    def apply_theme(self, theme: Theme) -> None:
        self.chart.apply_theme(theme)
        if self.outcome is not None:
            self.chart.set_rows(self.outcome.knob, self.outcome.rows)
