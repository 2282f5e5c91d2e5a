"""Export what is on screen: PNG (pixels) or SVG (vectors: one <rect> per drawn span)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtGui import QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QWidget


def export_png(widget: QWidget, path: str | Path) -> Path:
    path = Path(path)
    if not widget.grab().save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    return path


def export_svg(widget: QWidget, path: str | Path, title: str = "Lumos timeline") -> Path:
    path = Path(path)
    size = widget.size()
    gen = QSvgGenerator()
    gen.setFileName(str(path))
    gen.setSize(QSize(size.width(), size.height()))
    gen.setViewBox(QRect(0, 0, size.width(), size.height()))
    gen.setTitle(title)
    gen.setDescription("Exported by Lumos")
    painter = QPainter(gen)
    try:
        widget.render(painter, QPoint(0, 0))
    finally:
        painter.end()
    if not path.is_file():
        raise OSError(f"could not write {path}")
    return path
