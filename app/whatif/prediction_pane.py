"""The Prediction tab: the numbers of the scenario shown on the timeline.

A headline (predicted vs measured iteration time, the replay error or the change against the
replayed baseline), breakdown bars measured vs predicted side by side, every iteration of every
simulated rank (measured, predicted, difference), and for an estimate what was re-timed by which
model. Every number is the scenario's :class:`~lumos_core.whatif.scenario.ScenarioSummary`.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.panels.cpu_paced_banner import CpuPacedBanner
from app.panels.summary_panes import BREAKDOWN, TablePane
from app.panels.table_model import Column, ms_or_blank
from app.panels.table_pane import write_tables
from app.plot_theme import theme_plot
from app.theme import LIGHT, Theme
from app.whatif.headline import cpu_paced_text, gpu_bound_changes, rate_text
from lumos_core.api.scenarios import IterationRow, Retiming, ScenarioSummary
from lumos_core.api.views import Breakdown


def _pct(v: float) -> str:
    return "" if math.isnan(v) else f"{v:+.2f} %"


def breakdown_parts_ms(b: Breakdown) -> list[float]:
    return [b.exposed_compute_ns / 1e6, b.overlapped_ns / 1e6, b.exposed_comm_ns / 1e6, b.other_ns / 1e6]


class BreakdownBars(pg.PlotWidget):
    """Horizontal stacked bars, one per outcome (measured, replayed, predicted), in ms."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.bars: list[pg.BarGraphItem] = []
        self.texts: list[pg.TextItem] = []
        self.rows: list[tuple[str, Breakdown, float]] = []
        self._longest = 1.0  # the longest bar (ms)
        self.plotItem.setMenuEnabled(False)
        self.plotItem.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.getViewBox().invertY(True)
        self.getAxis("bottom").enableAutoSIPrefix(False)  # ms, as the headline says
        self.setMinimumHeight(110)
        self.getViewBox().sigResized.connect(lambda _vb: self.fit_labels())
        self.apply_theme(theme)

    def sizeHint(self) -> QSize:
        # three bars read well at ~140 px; a view's default hint (hundreds of px) would make the
        # Prediction tab's top part scroll in a short window although it fits
        return QSize(super().sizeHint().width(), 140)

    def set_rows(self, rows: list[tuple[str, Breakdown, float]]) -> None:
        """(label, breakdown, iteration ms) per bar, top to bottom."""
        self.rows = rows
        for item in [*self.bars, *self.texts]:
            self.removeItem(item)
        self.bars, self.texts = [], []
        if not rows:
            return
        y = np.arange(len(rows), dtype=float)
        parts = np.asarray([breakdown_parts_ms(b) for _, b, _ in rows])
        left = np.zeros(len(rows))
        for k, (label, color) in enumerate(BREAKDOWN):
            bar = pg.BarGraphItem(
                x0=left, y=y, height=0.62, width=parts[:, k], brush=QColor(color), pen=pg.mkPen(None)
            )
            bar.setToolTip(label)
            self.addItem(bar)
            self.bars.append(bar)
            left = left + parts[:, k]
        for i, (_, _, total) in enumerate(rows):
            t = pg.TextItem(f"{total:.2f} ms", color=self._fg, anchor=(0, 0.5))
            t.setPos(float(left[i]), float(i))
            self.addItem(t)
            self.texts.append(t)
        self.getAxis("left").setTicks([[(float(i), label) for i, (label, _, _) in enumerate(rows)]])
        self.setYRange(-0.6, len(rows) - 0.4, padding=0)
        self._longest = float(left.max()) if len(left) else 1.0
        self.fit_labels()

    def fit_labels(self) -> None:
        """Leave room right of the longest bar for its value label at the plot's current width (a
        fixed 30 % margin clips the label, "41.57 m", in a narrow dock)."""
        if not self.texts:
            return
        plot_px = float(self.getViewBox().width())
        label_px = max(t.boundingRect().width() for t in self.texts) + 8.0
        room = label_px / plot_px if plot_px > 0 else 0.3
        room = min(max(room, 0.08), 0.6)  # a very narrow plot keeps at least 40 % for the bars
        self.setXRange(0, self._longest / (1.0 - room), padding=0)

    def apply_theme(self, theme: Theme) -> None:
        self._fg = QColor(theme.foreground)
        theme_plot(self, theme)
        for t in self.texts:
            t.setColor(self._fg)


class PredictionPane(QWidget):
    """See the module docstring."""

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.summary: ScenarioSummary | None = None
        self.banner = CpuPacedBanner()
        self.gpu_bound_requested = self.banner.gpu_bound_requested
        self.headline = QLabel()
        self.headline.setWordWrap(True)
        self.headline.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bars = BreakdownBars(theme)
        legend = " ".join(
            f"<span style='color:{c}'>■</span>&nbsp;{label}&nbsp;&nbsp;" for label, c in BREAKDOWN
        )
        self.legend = QLabel(legend)
        self.legend.setWordWrap(True)
        self.iterations = TablePane(
            "iterations",
            [
                Column("rank", lambda r: r.rank, numeric=True),
                Column(
                    "stands for",
                    lambda r: r.stands_for,
                    tooltip="ranks of the predicted job this one represents",
                ),
                Column("iteration", lambda r: r.iteration),
                Column("measured (ms)", lambda r: r.measured_ms, ms_or_blank, "on the traced rank", True),
                Column("predicted (ms)", lambda r: r.predicted_ms, ms_or_blank, numeric=True),
                Column(
                    "vs measured",
                    lambda r: r.diff_pct,
                    _pct,
                    "the replay error, or the predicted change",
                    True,
                ),
            ],
            IterationRow,
        )
        self.retimed = TablePane(
            "retimed",
            [
                Column("tasks", lambda r: r.count, lambda v: f"{v:,}", numeric=True),
                Column("what", lambda r: r.what),
                Column("model", lambda r: r.model),
                Column("from", lambda r: r.detail),
            ],
            Retiming,
        )
        self.notes = QLabel()
        self.notes.setWordWrap(True)
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(4, 4, 4, 0)
        tl.addWidget(self.banner)
        tl.addWidget(self.headline)
        tl.addWidget(self.bars, 1)
        tl.addWidget(self.legend)
        # In a short window the headline, bars and legend need more height than the splitter
        # gives them; a layout squeezed below its minimum draws its widgets over each other (the
        # legend over the bars), so the three scroll together instead.
        self.top_scroll = QScrollArea()
        self.top_scroll.setWidget(top)
        self.top_scroll.setWidgetResizable(True)
        self.top_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.top_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.top_scroll.setMinimumHeight(220)  # the bars stay in view; the tables scroll
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.top_scroll)
        split.addWidget(self.iterations)
        split.addWidget(self.retimed)
        split.setSizes([260, 220, 110])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(split, 1)
        lay.addWidget(self.notes)
        self.show_summary(None)

    def show_summary(self, s: ScenarioSummary | None, waiting: str = "") -> None:
        self.summary = s
        self.banner.show_text(cpu_paced_text(s) if s is not None else "", gpu_bound_changes(s) if s else {})
        if s is None:
            self.headline.setText(
                html.escape(waiting)
                or "No prediction yet: the baseline replay runs when a job opens; change the configuration "
                "in the What-if panel and press Estimate."
            )
            self.bars.set_rows([])
            self.bars.hide()
            self.legend.hide()
            self.iterations.set_rows([])
            self.retimed.set_rows([])
            self.retimed.hide()
            self.notes.setText("")
            return
        self.headline.setText(headline_html(s))
        self.bars.show()
        self.legend.show()
        rows = [("measured", s.measured.breakdown, s.measured.iteration_us / 1000)]
        if s.predicted_from:  # the job it was predicted from, not this job's replay
            rows.append(("source job", s.replayed.breakdown, s.replayed.iteration_us / 1000))
        elif s.kind == "estimate":
            rows.append(("replayed", s.replayed.breakdown, s.replayed.iteration_us / 1000))
        rows.append(
            (
                "predicted" if s.kind == "estimate" else "replayed",
                s.predicted.breakdown,
                s.iteration_us / 1000,
            )
        )
        self.bars.set_rows(rows)
        self.iterations.set_rows(s.iterations)
        self.retimed.set_rows(s.retimed, sort_column=0)
        self.retimed.setVisible(s.kind == "estimate")
        notes = [*s.notes]
        self.notes.setText("<br>".join(f"<small>note: {html.escape(n)}</small>" for n in notes[:6]))

    def show_waiting(self, text: str) -> None:
        """Say what the pane waits for while it has no scenario to show."""
        if self.summary is None and text:
            self.headline.setText(html.escape(text))

    def export_csv(self, folder: str | Path) -> list[Path]:
        if self.summary is None:
            return []
        return write_tables(self.summary.tables(), folder)

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.bars.apply_theme(theme)


def headline_html(s: ScenarioSummary) -> str:
    name = html.escape(s.name)
    pred = s.iteration_us / 1000
    meas = s.measured.iteration_us / 1000
    if s.kind == "replay":
        return (
            f"<b>{name}</b>: replayed <b>{pred:.3f} ms</b> per iteration "
            f"(<b style='white-space:nowrap'>{html.escape(rate_text(s))}</b>), measured {meas:.3f} ms. "
            f"Replay error (in-sample): <b>{s.replay_error_pct:.2f} %</b> mean |error| over "
            f"{len(s.iterations)} rank-iterations; <tt>lumos replay</tt> gives the hold-out figure."
        )
    sim = len(s.represents)
    gpus = f"{s.world_size} GPU{'s' * (s.world_size != 1)}"
    ranks = f"{gpus}, simulated as {sim} rank{'s' * (sim != 1)}" if sim != s.world_size else gpus
    if s.predicted_from:
        source = html.escape(s.predicted_from)
        return (
            f"<b>{name}</b> ({ranks}): predicted <b>{pred:.3f} ms</b> per iteration "
            f"(<b style='white-space:nowrap'>{html.escape(rate_text(s))}</b>) vs measured "
            f"{meas:.3f} ms: <b>{s.error_pct:+.1f} %</b> error, hold-out (the prediction never saw "
            f"this job; null model, this job = {source}: {s.null_error_pct:+.1f} %); "
            f"{source} replayed {s.replayed.iteration_us / 1000:.3f} ms." + memory_html(s)
        )
    head = (
        f"<b>{name}</b> ({ranks}): predicted <b>{pred:.3f} ms</b> per iteration, "
        f"<b>{s.change_pct:+.1f} %</b> vs the replayed baseline ({s.replayed.iteration_us / 1000:.3f} ms); "
        f"<b style='white-space:nowrap'>{html.escape(rate_text(s))}</b>"
    )
    base = (s.estimate_json or {}).get("throughput") or {}
    tc = base.get("change_pct")
    if s.work_changed and tc is not None:  # different work per iteration: the rate decides
        head += (
            f", <b>throughput {tc:+.1f} % per GPU</b> (the work per iteration changes: rank by throughput)"
        )
    return head + f"; measured {meas:.3f} ms." + memory_html(s)


OUT_OF_MEMORY_COLOR = "#DC2626"


def memory_html(s: ScenarioSummary) -> str:
    """ " Memory: peak 41.6 GiB per GPU of 80.0 GiB (A100): fits." - red when it does not fit."""
    mem = (s.estimate_json or {}).get("memory")
    if not mem:
        return ""
    peak, cap = mem["peak_bytes"] / 2**30, mem["capacity_bytes"] / 2**30
    text = (
        f"predicted peak memory <b>{peak:,.1f} GiB</b> per GPU of {cap:,.1f} GiB ({html.escape(mem['gpu'])})"
    )
    if mem["fits"]:
        return f"<br>Memory: {text}: fits."
    return (
        f"<br><span style='color:{OUT_OF_MEMORY_COLOR}'>Memory: {text}: <b>does not fit</b> "
        f"(out of memory on stage {mem['peak_stage']}).</span>"
    )
