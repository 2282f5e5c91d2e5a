"""Pareto view of a grid sweep: predicted iteration time against GPUs, every estimated configuration
a dot, the configurations that nothing beats on both (:func:`lumos_core.sweep.results.pareto_front`)
joined by a line. Configurations predicted not to fit in GPU memory are drawn as grey crosses, with
the reason in their tooltip: they are never on the front. Click a dot to pick its configuration."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtGui import QColor

from app.plot_theme import theme_plot
from app.theme import LIGHT, Theme
from lumos_core.api.sweep import GridRow, pareto_front

FRONT_COLOR = "#E15759"
OUT_OF_MEMORY_COLOR = "#DC2626"
OOM_MARK = "#9CA3AF"


class ParetoChart(pg.PlotWidget):
    """See the module docstring. ``point_clicked`` carries the index of the row in :meth:`set_rows`."""

    point_clicked = Signal(int)

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.items: list[Any] = []
        self.rows: list[GridRow] = []
        self.front: list[int] = []
        self.by = "time"
        self.plotItem.setMenuEnabled(False)
        self.plotItem.hideButtons()
        self.setMouseEnabled(x=False, y=False)
        self.setLabel("left", "iteration time (ms)")
        self.setLabel("bottom", "GPUs")
        self.getAxis("left").enableAutoSIPrefix(False)
        self.apply_theme(theme)

    def set_rows(self, rows: list[GridRow], selected: int | None = None, by: str = "time") -> None:
        """``by="throughput"`` when the configurations do different work per iteration: the job's
        tokens/s (all GPUs) against GPUs, higher is better."""
        for item in self.items:
            self.removeItem(item)
        self.items = []
        self.rows = list(rows)
        self.by = by
        self.front = pareto_front(self.rows, by)
        rate = by == "throughput"
        self.setLabel("left", "throughput (k tokens/s, whole job)" if rate else "iteration time (ms)")
        ok = [i for i, r in enumerate(self.rows) if r.estimated]  # with numbers, fitting or not
        if rate:
            ok = [i for i in ok if not math.isnan(self.rows[i].tokens_per_s_per_gpu)]
        on_front = set(self.front)
        if not ok:
            return
        # GPUs double from one configuration to the next: log2 spaces them evenly
        x = {i: math.log2(self.rows[i].world_size) for i in ok}
        if rate:
            y = {i: self.rows[i].tokens_per_s_per_gpu * self.rows[i].world_size / 1000 for i in ok}
        else:
            y = {i: self.rows[i].iteration_us / 1000 for i in ok}
        unit = " k tokens/s" if rate else " ms"
        dots = pg.ScatterPlotItem(
            [x[i] for i in ok],
            [y[i] for i in ok],
            data=ok,
            size=8,
            brush=[pg.mkBrush(FRONT_COLOR if i in on_front else self._muted) for i in ok],
            symbol=["o" if self.rows[i].ok else "x" for i in ok],
            pen=pg.mkPen(None),
            hoverable=True,
            tip=lambda x, y, data: (
                f"{self.rows[data].key}\n{y:,.3f}{unit} on {2**x:.0f} GPUs"
                + ("" if self.rows[data].ok else f"\n{self.rows[data].note}: not a candidate")
            ),
        )
        for k, i in enumerate(ok):
            if not self.rows[i].ok:
                dots.points()[k].setBrush(pg.mkBrush(OOM_MARK))
        dots.sigClicked.connect(self._on_clicked)
        self.addItem(dots)
        self.items.append(dots)
        line = pg.PlotDataItem(
            [x[i] for i in self.front],
            [y[i] for i in self.front],
            pen=pg.mkPen(FRONT_COLOR, width=2),
        )
        line.setZValue(-1)  # under the dots, which take the clicks
        self.addItem(line)
        self.items.append(line)
        if selected is not None and selected in x:
            ring = pg.ScatterPlotItem(
                [x[selected]], [y[selected]], size=16, brush=pg.mkBrush(None), pen=pg.mkPen(self._fg, width=2)
            )
            self.addItem(ring)
            self.items.append(ring)
        gpus = sorted({self.rows[i].world_size for i in ok})
        self.getAxis("bottom").setTicks([[(math.log2(g), str(g)) for g in gpus]])
        lo, hi = math.log2(gpus[0]), math.log2(gpus[-1])
        self.setXRange(lo - 0.5, hi + 0.5, padding=0)
        top = float(np.nanmax(list(y.values())))
        self.setYRange(0, top * 1.1, padding=0)

    def _on_clicked(self, _item: Any, points: Any, *_: Any) -> None:
        if len(points):
            self.point_clicked.emit(int(points[0].data()))

    def apply_theme(self, theme: Theme) -> None:
        self._fg = QColor(theme.foreground)
        self._muted = QColor(theme.muted)
        theme_plot(self, theme)
        if self.rows:
            self.set_rows(self.rows, by=self.by)
