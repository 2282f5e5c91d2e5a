"""A one-line label for the status bar that shortens its text with "…" to the room it gets, and
shows the whole text as its tooltip.

Status messages vary in length (a load summary, a synthetic-job note, a replay match); a plain
QLabel either pushes the window wider or is cut mid-word without a sign. This one asks for little
room (a few characters) and says when something was left out. ``text()`` is the whole text.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def text(self) -> str:  # type: ignore[override]
        return self._full

    def setText(self, text: str) -> None:  # type: ignore[override]
        self._full = text
        self._fit()
        self.updateGeometry()

    def sizeHint(self) -> QSize:
        # the whole text when there is room for it
        m = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self._full) + m.left() + m.right() + 4
        return QSize(width, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        m = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance("Mmm…") + m.left() + m.right()
        return QSize(width, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        m = self.contentsMargins()
        room = max(self.width() - m.left() - m.right(), 0)
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, room)
        QLabel.setText(self, shown)
        self.setToolTip(self._full if shown != self._full else "")
