"""A graphics item that paints whatever part of the job is in view.

The timeline's items (spans, overlay, memory lane, stalls) each draw only the visible part of the
data in device coordinates, so their bounding rectangle is simply the job's extent (ms by rows),
padded generously so that pyqtgraph never culls them while the user pans past an edge.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRectF

from app.theme import LIGHT, Theme


class ExtentItem(pg.GraphicsObject):
    """Holds the theme and the data extent; subclasses paint."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        super().__init__()
        self.theme = theme
        self._extent = QRectF(0, 0, 1, 1)

    def set_extent(self, extent: QRectF) -> None:
        self.prepareGeometryChange()
        self._extent = QRectF(extent)
        self.update()

    def boundingRect(self) -> QRectF:
        r = self._extent
        pad = max(r.width(), 1.0)
        return QRectF(r.left() - pad, -1.0, r.width() + 2 * pad, r.height() + 2.0)
