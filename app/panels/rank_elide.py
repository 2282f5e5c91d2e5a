"""Trace file names shortened so that the rank stays visible.

Per-rank trace files share long prefixes and suffixes and differ in a short token somewhere in the
middle ("Baseline - 12-11 - e049e-rank0-chrome-trace.json.gz", "worker3_step_12.1694…pt.trace.json.gz"):
eliding at either end or in the middle hides exactly the part that tells them apart. The
:class:`KeepRankDelegate` draws a table cell's text with the rank token (``rank3``, ``rank-3``,
``worker3``, as the loader reads it) kept whole and the text before and after it elided.
"""

from __future__ import annotations

import re

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QFontMetrics, QPainter
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem

# the rank in a file name as the loader reads it (lumos_core.trace.loader.rank_from_file_name)
RANK_IN_NAME = re.compile(r"(?<![a-z])(?:rank|worker)[-_ ]?\d+(?!\d)", re.IGNORECASE)


def elide_keeping_rank(text: str, fm: QFontMetrics, width: int) -> str:
    """``text`` fitted into ``width`` pixels, the rank token whole (plain end elision without one)."""
    if fm.horizontalAdvance(text) <= width:
        return text
    m = RANK_IN_NAME.search(text)
    if m is None:
        return fm.elidedText(text, Qt.TextElideMode.ElideMiddle, width)
    token = text[m.start() : m.end()]
    room = width - fm.horizontalAdvance(token)
    if room <= fm.horizontalAdvance("……"):
        return fm.elidedText(token, Qt.TextElideMode.ElideRight, width)
    head, tail = text[: m.start()], text[m.end() :]
    tail_room = min(fm.horizontalAdvance(tail), room // 3)  # a little of what follows (".json.gz")
    tail_e = fm.elidedText(tail, Qt.TextElideMode.ElideRight, tail_room) if tail else ""
    head_e = fm.elidedText(head, Qt.TextElideMode.ElideLeft, room - fm.horizontalAdvance(tail_e))
    return head_e + token + tail_e


class KeepRankDelegate(QStyledItemDelegate):
    """Draws its column's text with :func:`elide_keeping_rank`; the tooltip keeps the whole name."""

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        style = opt.widget.style() if opt.widget is not None else QApplication.style()
        text_rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, opt.widget)
        margin = 2 * (style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, opt.widget) + 1)
        opt.text = elide_keeping_rank(opt.text, opt.fontMetrics, text_rect.width() - margin)
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
