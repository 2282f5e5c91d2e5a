"""The theme's colours on a pyqtgraph chart: background, axis lines and tick labels."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor

from app.theme import Theme


def theme_plot(plot: pg.PlotWidget, theme: Theme) -> None:
    """Paint ``plot``'s background and its left and bottom axes in ``theme``'s colours."""
    plot.setBackground(QColor(theme.background))
    for name in ("left", "bottom"):
        ax = plot.getAxis(name)
        ax.setPen(pg.mkPen(theme.muted))
        ax.setTextPen(pg.mkPen(theme.foreground))
